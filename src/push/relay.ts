import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { readUpTo } from '../http/body.js';
import { type BodyLimits, watchBody } from '../http/body-deadline.js';
import { sendShimError, ShimError, toShimError } from '../http/errors.js';
import { contentLengthOf } from '../http/headers.js';
import { listen } from '../http/listen.js';
import { routingPath } from '../http/routing-path.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import { isClientAbort } from '../upstream/transport.js';
import { relay } from '../upstream/relay.js';
import { Bouncer, BouncerTimeoutError, type BouncerAnswer } from './bouncer.js';
import { changesAbove, fillPayloads, kindOf, parseNotify, payloadSlots, pendingChanges, realmUrlOf, type PayloadSlot } from './notify.js';
import { realmFactsOf, type RealmFacts } from './realm.js';
import { spliceMembers } from './splice.js';

/**
 * M7: the push relay, a listener of its own between an old Zulip server and its push bouncer
 * (the server's PUSH_NOTIFICATION_BOUNCER_URL points here). `POST /api/v1/remotes/push/notify`
 * gets what the app requires in each legacy payload and its server lacks (notify.ts, the
 * registry's notification changes); every other request, and every answer, goes on as it came.
 * The server's credentials (HTTP Basic: its zulip_org_id and key) go to the bouncer with the
 * request and nowhere else: no log line, store, metric or recording holds them (P13).
 */

export const NOTIFY_PATH = '/api/v1/remotes/push/notify';

export interface PushRelayOptions {
  /** push.bouncerUrl */
  bouncerUrl: string;
  /** upstream.timeoutMs: the bouncer's silence timeout. */
  timeoutMs: number;
  /** server.bodyLimitBytes: a larger notification goes on unread, as it came. */
  bodyLimitBytes: number;
  /** server.bodyTimeoutMs and server.bodyReadTimeoutMs (X11): the server's body must keep arriving too. */
  bodyLimits: () => BodyLimits;
  realm: RealmFacts;
  log: Logger;
  metrics: Metrics;
}

export interface PushRelay {
  readonly server: http.Server;
  listen(port: number, host: string): Promise<{ port: number; url: string }>;
  /** Closes the bouncer's connections (the listener is closed by the shim's drain). */
  close(): Promise<void>;
}

export function createPushRelay(o: PushRelayOptions): PushRelay {
  const bouncer = new Bouncer({ url: o.bouncerUrl, timeoutMs: o.timeoutMs });
  const log = o.log.child({ component: 'push-relay' });
  const forward = forwarder(bouncer, o.metrics, log);
  const notify = notifier(o, forward, log);
  const server = http.createServer({ requireHostHeader: false }, (req, res) => {
    watchBody(
      req,
      res,
      o.bodyLimits(),
      {},
      {
        // The 408 closes the connection; the bouncer call the body fed then fails with it, unanswered.
        release: () => {},
        timedOut: (facts) => log.warn(facts, 'push relay: a request body did not keep arriving; answered 408'),
      },
    ); // X11
    const isNotify = req.method === 'POST' && routingPath(req.url ?? '/') === NOTIFY_PATH;
    (isNotify ? notify(req, res) : forward(req, res)).catch((e: unknown) => fail(res, e, log));
  });
  return { server, listen: (port, host) => listen(server, port, host), close: () => bouncer.close() };
}

type Forward = (req: IncomingMessage, res: ServerResponse, body?: Buffer | Readable) => Promise<void>;

/** The request to the bouncer and its answer back as it came (E1); a failure counted, then thrown. */
function forwarder(bouncer: Bouncer, metrics: Metrics, log: Logger): Forward {
  return async (req, res, body) => {
    let answer: BouncerAnswer;
    try {
      answer = await bouncer.send(req, body);
    } catch (e) {
      if (e instanceof ShimError) {
        metrics.pushBouncerErrors.inc({ reason: e instanceof BouncerTimeoutError ? 'timeout' : 'unreachable' });
        log.warn({ err: { code: e.code, message: e.message }, path: routingPath(req.url ?? '/') }, 'push bouncer gave no answer');
      }
      throw e;
    }
    if (answer.status >= 400) metrics.pushBouncerErrors.inc({ reason: answer.status >= 500 ? 'http_5xx' : 'http_4xx' });
    await relay(res, answer);
  };
}

/** `POST …/push/notify`: read (bounded), the payloads filled in where they lack a field, sent on. */
function notifier(o: PushRelayOptions, forward: Forward, log: Logger) {
  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const read = await readUpTo(req, o.bodyLimitBytes, contentLengthOf(req.headers));
    if (!read.whole) {
      // Larger than any notification: not one the relay reads; on as it came, streamed.
      o.metrics.pushNotifications.inc({ kind: 'other', changed: 'false' });
      return forward(req, res, Readable.from(concatThen(read.head, read.rest)));
    }
    const text = readable(req, read.body);
    const json = text === undefined ? undefined : parseNotify(read.body);
    const slots = json ? payloadSlots(json) : [];
    const kind = kindOf(slots.map((s) => s.payload));
    const changed = text === undefined ? undefined : await withFields(o.realm, log, text, slots, kind);
    const body = changed === undefined ? read.body : Buffer.from(changed);
    o.metrics.pushNotifications.inc({ kind, changed: String(changed !== undefined) });
    return forward(req, res, body);
  };
}

/**
 * The notification's text with the fields its payloads lack written into them (the server's
 * bytes otherwise as they came); undefined when it lacks nothing the realm's level calls for.
 */
async function withFields(realm: RealmFacts, log: Logger, text: string, slots: PayloadSlot[], kind: string): Promise<string | undefined> {
  const payloads = slots.map((s) => s.payload);
  const pending = pendingChanges(payloads);
  if (pending.length === 0) return undefined;
  const { info, unknown } = await realmFactsOf(realm, realmUrlOf(payloads));
  const added = fillPayloads(payloads, changesAbove(pending, info?.featureLevel), { name: info?.realmName });
  if (unknown)
    log.warn(
      { kind, why: unknown, added: added.added },
      "push relay: the realm's server_settings could not be had; a realm_name added is its host",
    );
  if (added.added.length === 0) return undefined;
  log.debug({ kind, added: added.added, sources: added.sources }, 'push notification relayed');
  return spliceMembers(
    text,
    slots.map((s, i) => ({ path: s.path, members: added.members[i] ?? [] })),
  );
}

/**
 * The body as text, where the relay may read it: not encoded (`Content-Encoding`), and UTF-8
 * that encodes to the same bytes again (else a changed body would change more than it adds).
 */
function readable(req: IncomingMessage, body: Buffer): string | undefined {
  if (req.headers['content-encoding']) return undefined;
  const text = body.toString('utf8');
  return Buffer.from(text).equals(body) ? text : undefined;
}

/** The bytes already read, then the rest of the stream. */
async function* concatThen(head: Buffer[], rest: Readable): AsyncGenerator<Buffer> {
  yield* head;
  for await (const chunk of rest) yield chunk as Buffer;
}

/** E2: the relay's own answer when there is no bouncer answer to pass on. */
function fail(res: ServerResponse, e: unknown, log: Logger): void {
  // The server went away (its connection closed): nobody to answer.
  if (isClientAbort(e) || res.destroyed || res.headersSent) return;
  if (!(e instanceof ShimError)) log.error({ err: { message: (e as Error)?.message } }, 'push relay: unexpected error');
  sendShimError(res, toShimError(e));
}
