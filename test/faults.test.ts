import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LedgerState } from '../src/presence/ledger.js';
import { failing, startFake, type Era, type FakeZulip } from './support/fake-zulip.js';
import { jsonOf, send, type Answer, type Outgoing } from './support/http-client.js';
import { until } from './support/cli-run.js';
import { realmKeyOf } from './support/realm-key.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * Upstream faults (E1, E2, E4): connection refused, resets in the headers and in the body,
 * silent headers and bodies, HTML error pages, 2xx answers that are not the JSON expected,
 * 429 with Retry-After, server_settings failing under a presence poll. Each gets exactly the
 * upstream's answer unchanged (E1) or the shim's own error in Zulip's shape (E2); no fault
 * changes the presence ledger or loses an update for a later delta poll; no socket, timer or
 * listener is left behind.
 */

const TIMEOUT_MS = 600;
const STALL_MS = 3_000;
const REQUEST_TIMEOUT_MS = 15_000;

type EndpointName = 'presence' | 'profile' | 'register' | 'server_settings' | 'passthrough';

interface Endpoint {
  out: (fake: FakeZulip) => Outgoing;
  /** The upstream path the fault is put on. */
  upstreamPath: string;
  intercepted: boolean;
}

const formBody = (o: Record<string, string>) => Buffer.from(new URLSearchParams(o).toString());
const FORM = 'application/x-www-form-urlencoded';

const ENDPOINTS: Record<EndpointName, Endpoint> = {
  presence: {
    out: (f) => ({
      method: 'POST',
      path: '/api/v1/users/me/presence',
      headers: { authorization: f.auth(10), 'content-type': FORM },
      body: formBody({ status: 'active', last_update_id: '-1' }),
    }),
    upstreamPath: '/api/v1/users/me/presence',
    intercepted: true,
  },
  profile: {
    out: (f) => ({ method: 'GET', path: '/api/v1/users/me', headers: { authorization: f.auth(11) } }),
    upstreamPath: '/api/v1/users/me',
    intercepted: true,
  },
  register: {
    out: (f) => ({
      method: 'POST',
      path: '/api/v1/register',
      headers: { authorization: f.auth(12), 'content-type': FORM },
      body: formBody({ event_types: '["presence"]', slim_presence: 'true' }),
    }),
    upstreamPath: '/api/v1/register',
    intercepted: true,
  },
  server_settings: {
    out: () => ({ method: 'GET', path: '/api/v1/server_settings' }),
    upstreamPath: '/api/v1/server_settings',
    intercepted: true,
  },
  passthrough: {
    out: (f) => ({ method: 'GET', path: '/api/v1/messages?anchor=newest&num_before=1', headers: { authorization: f.auth(13) } }),
    upstreamPath: '/api/v1/messages',
    intercepted: false,
  },
};

type FaultName =
  | 'reset-in-headers'
  | 'reset-in-body'
  | 'silent-headers'
  | 'silent-body'
  | 'html-500'
  | 'html-502'
  | 'truncated-2xx'
  | 'not-json-2xx'
  | 'rate-limited';

/** What the fake does instead of answering, on the faulted path. */
const FAULTS: Record<FaultName, (req: IncomingMessage, res: ServerResponse) => void> = {
  'reset-in-headers': (req) => {
    req.socket.write('HTTP/1.1 200 OK\r\nContent-Type: appli');
    req.socket.destroy();
  },
  'reset-in-body': (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '5000' });
    res.write('{"result":"success","msg":"","presences":{"user10@zulip.example.com":');
    setImmediate(() => res.socket?.destroy());
  },
  'silent-headers': (_req, res) => stall(res, () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}')),
  'silent-body': (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
    res.write('{"result":');
    stall(res, () => res.end());
  },
  'html-500': (_req, res) => htmlPage(res, 500),
  'html-502': (_req, res) => htmlPage(res, 502),
  'truncated-2xx': (_req, res) => {
    const text = '{"result":"success","msg":"","presences":{"user10@zulip.example.com":{"website":';
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(text.length) });
    res.end(text);
  },
  'not-json-2xx': (_req, res) => {
    const text = '<html><body>Welcome to nginx!</body></html>';
    res.writeHead(200, { 'content-type': 'text/html', 'content-length': String(text.length) });
    res.end(text);
  },
  'rate-limited': (_req, res) => {
    const text = JSON.stringify({
      result: 'error',
      msg: 'API usage exceeded rate limit',
      'retry-after': 28.706807374954224,
      code: 'RATE_LIMIT_HIT',
    });
    res.writeHead(429, {
      'content-type': 'application/json',
      'retry-after': '29',
      'x-ratelimit-remaining': '0',
      'x-upstream-fault': 'yes',
      'content-length': String(Buffer.byteLength(text)),
    });
    res.end(text);
  },
};

/** Stalls not yet over (their timers count among the process's resources). */
let stalling = 0;

/** Holds an answer back longer than the shim waits; gives up when the shim hangs up. */
function stall(res: ServerResponse, then: () => void): void {
  stalling++;
  let done = false;
  const over = () => {
    clearTimeout(t);
    if (!done) stalling--;
    done = true;
  };
  const t = setTimeout(() => {
    over();
    if (!res.destroyed) then();
  }, STALL_MS);
  res.on('close', over);
}

function htmlPage(res: ServerResponse, status: number): void {
  const text = `<html><head><title>${status}</title></head><body><h1>${status} Server Error</h1><p>nginx</p></body></html>`;
  res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', 'x-upstream-fault': 'yes', 'content-length': String(text.length) });
  res.end(text);
}

type Outcome = { kind: 'E1' } | { kind: 'E2'; status: number; code: string } | { kind: 'cut' };

const E2 = (status: number, code: string): Outcome => ({ kind: 'E2', status, code });
const UNAVAILABLE = E2(502, 'UPSTREAM_UNAVAILABLE');
const TIMED_OUT = E2(504, 'UPSTREAM_TIMEOUT');
const BAD_RESPONSE = E2(502, 'UPSTREAM_BAD_RESPONSE');

/** The one right answer for each fault on each endpoint. */
function expected(fault: FaultName, e: Endpoint): Outcome {
  switch (fault) {
    case 'reset-in-headers':
      return UNAVAILABLE;
    case 'reset-in-body':
      // A pass-through answer is already on its way: the client's connection is cut.
      return e.intercepted ? UNAVAILABLE : { kind: 'cut' };
    case 'silent-headers':
      return TIMED_OUT;
    case 'silent-body':
      return e.intercepted ? TIMED_OUT : { kind: 'cut' };
    case 'html-500':
    case 'html-502':
    case 'rate-limited':
      return { kind: 'E1' };
    case 'truncated-2xx':
    case 'not-json-2xx':
      // The pass-through does not read answers; an intercepted endpoint must (E2).
      return e.intercepted ? BAD_RESPONSE : { kind: 'E1' };
  }
}

/** The fault's own answer, as the upstream sent it, for comparing E1 answers byte for byte. */
async function upstreamAnswer(fault: FaultName): Promise<Answer> {
  const server = http.createServer((req, res) => FAULTS[fault](req, res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    const { port } = server.address() as net.AddressInfo;
    return await send(`http://127.0.0.1:${port}`, { method: 'GET', path: '/' }, { timeoutMs: REQUEST_TIMEOUT_MS });
  } finally {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  }
}

function expectOutcome(what: string, outcome: Outcome, a: Answer | Error, upstream?: Answer): void {
  if (outcome.kind === 'cut') {
    // Cut at once, not left waiting for the rest until the client gives up.
    expect(a, what).toBeInstanceOf(Error);
    expect((a as Error).message, what).not.toMatch(/no answer within/);
    return;
  }
  if (a instanceof Error) throw new Error(`${what}: no answer (${a.message})`);
  if (outcome.kind === 'E1') {
    // E1: the upstream's status, body and headers such as Retry-After, unchanged.
    expect(a.status, what).toBe(upstream!.status);
    expect(a.body.toString('latin1'), what).toBe(upstream!.body.toString('latin1'));
    expect(a.headers['content-type'], what).toBe(upstream!.headers['content-type']);
    for (const h of ['retry-after', 'x-ratelimit-remaining', 'x-upstream-fault'])
      expect(a.headers[h], `${what}: ${h}`).toBe(upstream!.headers[h]);
    return;
  }
  expect(a.status, `${what}: ${a.body.toString()}`).toBe(outcome.status);
  expect(a.headers['content-type'], what).toMatch(/^application\/json/);
  const body = jsonOf(a) as Record<string, unknown>;
  expect(Object.keys(body).sort(), what).toEqual(['code', 'msg', 'result']);
  expect(body.result, what).toBe('error');
  expect(body.code, what).toBe(outcome.code);
}

/** Sends a request; a transport failure (a cut connection) is returned, not thrown. */
function call(shim: RunningShim, out: Outgoing, agent?: http.Agent): Promise<Answer | Error> {
  return send(shim.url, out, { agent: agent ?? false, timeoutMs: REQUEST_TIMEOUT_MS }).catch((e: Error) => e);
}

/** Puts a fault on some upstream paths; no fault clears it. */
function setFault(fake: FakeZulip, paths: string[], fault?: FaultName): void {
  if (!fault) {
    fake.override = undefined;
    return;
  }
  fake.override = (req, res) => {
    if (!paths.includes((req.url ?? '').split('?')[0]!)) return false;
    FAULTS[fault](req, res);
    return true;
  };
}

const ALL_PATHS = Object.values(ENDPOINTS).map((e) => e.upstreamPath);
const ENDPOINT_LIST = Object.entries(ENDPOINTS) as Array<[EndpointName, Endpoint]>;

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

function resources(): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of process.getActiveResourcesInfo()) out.set(r, (out.get(r) ?? 0) + 1);
  return out;
}

type Modern = Record<string, { active_timestamp: number; idle_timestamp: number }>;

describe.each<Era>(['2.1', '7.0'])('upstream faults, Zulip %s upstream', (era) => {
  let fake: FakeZulip;
  let shim: RunningShim;
  let realmKey: string;
  const upstreamAnswers = new Map<FaultName, Answer>();

  beforeAll(async () => {
    fake = await startFake({ era });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    shim = await startShim(fake.url, { upstream: { timeoutMs: TIMEOUT_MS }, presence: { coalesceMs: 0 } });
    realmKey = await realmKeyOf(shim, fake.url, new URL(shim.url).host);
    for (const f of ['html-500', 'html-502', 'rate-limited', 'truncated-2xx', 'not-json-2xx'] as FaultName[])
      upstreamAnswers.set(f, await upstreamAnswer(f));
  });
  afterAll(async () => {
    await shim?.close();
    await fake?.stop();
  });

  const presencePoll = async (lastUpdateId: number): Promise<{ presences: Modern; id: number }> => {
    const a = await send(
      shim.url,
      {
        method: 'POST',
        path: '/api/v1/users/me/presence',
        headers: { authorization: fake.auth(10), 'content-type': FORM },
        body: formBody({ status: 'active', last_update_id: String(lastUpdateId) }),
      },
      { timeoutMs: REQUEST_TIMEOUT_MS },
    );
    expect(a.status, a.body.toString()).toBe(200);
    const body = jsonOf(a) as { presences: Modern; presence_last_update_id: number };
    return { presences: body.presences, id: body.presence_last_update_id };
  };

  it('answers every fault on every endpoint with E1 or E2, changes no state and loses no update', async () => {
    const first = await presencePoll(-1);
    const ledgerBefore = await shim.shim.context.store.load(realmKey);
    expect(ledgerBefore).toBeDefined();

    // Upstream changes while it is faulty: the delta poll afterwards must carry them.
    fake.advance(120);
    fake.report(12, 'idle');

    for (const fault of Object.keys(FAULTS) as FaultName[]) {
      // The fault on every endpoint's upstream path at once, one call each, side by side.
      setFault(fake, ALL_PATHS, fault);
      const answers = await Promise.all(ENDPOINT_LIST.map(([, e]) => call(shim, e.out(fake))));
      setFault(fake, []);
      for (const [i, [name, e]] of ENDPOINT_LIST.entries()) {
        expectOutcome(`${fault} on ${name}`, expected(fault, e), answers[i]!, upstreamAnswers.get(fault));
      }
      // No fault half-updates the realm's presence ledger (E1, E2).
      const ledger: LedgerState | undefined = await shim.shim.context.store.load(realmKey);
      expect(ledger, `${fault} changed the ledger`).toEqual(ledgerBefore);
    }

    const delta = await presencePoll(first.id);
    expect(delta.id).toBeGreaterThan(first.id);
    expect(Object.keys(delta.presences)).toContain('12');
    const full = await presencePoll(-1);
    expect(delta.presences['12']).toEqual(full.presences['12']);
    expect(full.presences['12']!.idle_timestamp).toBe(Math.floor(fake.now));
  }, 120_000);

  /**
   * A fresh shim (nothing cached about the upstream yet) with `paths` failing as `fault`: runs
   * `check`, then clears the fault and checks that presence recovers.
   */
  async function withFreshShim(paths: string[], fault: FaultName, check: (fresh: RunningShim) => Promise<void>): Promise<void> {
    const fresh = await startShim(fake.url, { upstream: { timeoutMs: TIMEOUT_MS }, presence: { coalesceMs: 0 } });
    try {
      setFault(fake, paths, fault);
      await check(fresh);
      setFault(fake, []);
      const ok = await call(fresh, ENDPOINTS.presence.out(fake));
      expect(ok instanceof Error ? ok.message : ok.status).toBe(200);
    } finally {
      setFault(fake, []);
      await fresh.close();
    }
  }

  it('answers a presence poll with the upstream’s refusal (E1) or E2 when server_settings fails, and recovers', async () => {
    const outcomes: Partial<Record<FaultName, Outcome>> = {
      // The upstream's own answer, Retry-After and all: what the client's call would have got.
      'html-500': { kind: 'E1' },
      'rate-limited': { kind: 'E1' },
      'reset-in-headers': UNAVAILABLE,
      'silent-headers': TIMED_OUT,
      'not-json-2xx': BAD_RESPONSE,
    };
    for (const [fault, outcome] of Object.entries(outcomes) as Array<[FaultName, Outcome]>) {
      const upstream = outcome.kind === 'E1' ? await upstreamAnswer(fault) : undefined;
      await withFreshShim(['/api/v1/server_settings'], fault, async (fresh) => {
        const a = await call(fresh, ENDPOINTS.presence.out(fake));
        expectOutcome(`server_settings ${fault} under presence`, outcome, a, upstream);
        // Register too: any intercepted endpoint that needs the level (the server relays the refusal).
        expectOutcome(`server_settings ${fault} under register`, outcome, await call(fresh, ENDPOINTS.register.out(fake)), upstream);
        expect(await fresh.shim.context.store.load(realmKey)).toBeUndefined();
        // Own profile does not need the level to answer: it checks every field instead (E4).
        const profile = await call(fresh, ENDPOINTS.profile.out(fake));
        expect(profile instanceof Error ? profile.message : profile.status).toBe(200);
      });
    }
  }, 60_000);

  it('remembers a Host the upstream refuses (4xx, X2) and relays the refusal (E1); a rate limit is asked again', async () => {
    const fresh = await startShim(fake.url, { upstream: { timeoutMs: TIMEOUT_MS }, featureLevel: { failureTtlMs: 60_000 } });
    try {
      const refusal = JSON.stringify({ result: 'error', msg: 'Invalid subdomain', code: 'BAD_REQUEST' });
      for (const [status, asked] of [
        [404, 1],
        [429, 2],
        [408, 2],
      ] as const) {
        fake.resetStats();
        // A cookie and a date were the shim's own call's: they go to no client.
        const headers = {
          'content-type': 'application/json',
          'retry-after': '7',
          'set-cookie': 'lb=1',
          date: 'Thu, 01 Jan 2015 00:00:00 GMT',
        };
        fake.override = failing('GET', '/api/v1/server_settings', { status, headers, body: refusal });
        // A Host of its own for each status: nothing remembered from the one before.
        const out = {
          ...ENDPOINTS.presence.out(fake),
          headers: { ...ENDPOINTS.presence.out(fake).headers, host: `refused-${status}.example.com` },
        };
        for (let i = 0; i < 2; i++) {
          const a = await call(fresh, out);
          if (a instanceof Error) throw a;
          expect([a.status, a.headers['retry-after'], a.body.toString()]).toEqual([status, '7', refusal]);
          expect(a.headers['set-cookie']).toBeUndefined();
          expect(a.headers.date).not.toBe('Thu, 01 Jan 2015 00:00:00 GMT');
        }
        expect(fake.stats.requests.get('GET /api/v1/server_settings')).toBe(asked);
      }
      // A redirect is no answer to the caller's call (E2), remembered all the same; a refusal up
      // to 1 KiB is remembered whole, a larger one goes to its first caller whole and is
      // remembered as E2 (X2: the upstream's pages cannot crowd the failures' budget).
      for (const [status, body, second] of [
        [301, '', 502],
        [404, 'x'.repeat(1024), 404],
        [404, 'x'.repeat(1025), 502],
      ] as const) {
        fake.resetStats();
        const headers = { location: 'https://chat.example.com/api/v1/server_settings', 'content-type': 'text/html' };
        fake.override = failing('GET', '/api/v1/server_settings', { status, headers, body });
        const out = {
          ...ENDPOINTS.presence.out(fake),
          headers: { ...ENDPOINTS.presence.out(fake).headers, host: `moved-${status}-${body.length}.example.com` },
        };
        const first = await call(fresh, out);
        const again = await call(fresh, out);
        if (first instanceof Error || again instanceof Error) throw first instanceof Error ? first : again;
        expect([first.status, again.status]).toEqual([status === 301 ? 502 : status, second]);
        if (status === 301) expect(first.headers.location).toBeUndefined();
        else expect(first.body.toString()).toBe(body);
        if (second === 502) expect(jsonOf(again)).toMatchObject({ result: 'error', code: 'UPSTREAM_BAD_RESPONSE' });
        else expect(again.body.toString()).toBe(body);
        expect(fake.stats.requests.get('GET /api/v1/server_settings')).toBe(1);
      }
    } finally {
      fake.override = undefined;
      await fresh.close();
    }
  });

  it('answers with E2 or the documented fallbacks when the user list fails', async () => {
    const outcomes: Record<string, Outcome> = {
      'html-500': BAD_RESPONSE,
      'reset-in-headers': UNAVAILABLE,
      'silent-headers': TIMED_OUT,
      'truncated-2xx': BAD_RESPONSE,
    };
    for (const [fault, outcome] of Object.entries(outcomes) as Array<[FaultName, Outcome]>) {
      await withFreshShim(['/api/v1/users'], fault, async (fresh) => {
        const modern = await call(fresh, ENDPOINTS.presence.out(fake));
        if (era === '2.1') {
          // Without the realm's email → id map a 2.1 answer cannot be made modern (E2).
          expectOutcome(`user list ${fault} under a modern presence poll`, outcome, modern);
          expect(await fresh.shim.context.store.load(realmKey)).toBeUndefined();
        } else {
          expect(modern instanceof Error ? modern.message : modern.status).toBe(200);
        }
        // Own profile answers all the same, with the documented fallbacks (U2, E4).
        const profile = await call(fresh, ENDPOINTS.profile.out(fake));
        expect(profile instanceof Error ? profile.message : profile.status).toBe(200);
      });
    }
  }, 60_000);

  it('answers 502 UPSTREAM_UNAVAILABLE on every endpoint when the upstream refuses connections', async () => {
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const { port } = probe.address() as net.AddressInfo;
    await new Promise<void>((r) => probe.close(() => r()));
    const dead = await startShim(`http://127.0.0.1:${port}`, { upstream: { timeoutMs: TIMEOUT_MS } });
    try {
      for (const [name, e] of Object.entries(ENDPOINTS)) {
        expectOutcome(`refused on ${name}`, UNAVAILABLE, await call(dead, e.out(fake)));
      }
      const healthz = await call(dead, { method: 'GET', path: '/healthz' });
      expect(healthz instanceof Error ? healthz.message : healthz.status).toBe(200);
    } finally {
      await dead.close();
    }
  });

  // One era is enough for the resource count: the paths that fail are the same.
  it.skipIf(era !== '2.1')(
    'leaves no socket, timer or listener behind after repeated faults',
    async () => {
      const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
      const warnings: string[] = [];
      const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
      process.on('warning', onWarning);
      const listeners = () =>
        ['request', 'connection', 'clientError', 'upgrade', 'connect'].map((ev) => shim.shim.server.listenerCount(ev));
      const round = async () => {
        for (const fault of Object.keys(FAULTS) as FaultName[]) {
          setFault(fake, ALL_PATHS, fault);
          await Promise.all(ENDPOINT_LIST.map(([, e]) => call(shim, e.out(fake), agent)));
          setFault(fake, []);
          // Ordinary traffic in between, on the same kept-alive connections.
          await Promise.all(ENDPOINT_LIST.map(([, e]) => call(shim, e.out(fake), agent)));
        }
      };
      try {
        await round(); // warm-up: pools fill to what sequential traffic needs
        await until('the fake to end its stalls', () => (stalling === 0 ? true : undefined));
        const before = resources();
        const fakeBefore = await fake.connections();
        const listenersBefore = listeners();
        for (let i = 0; i < 3; i++) await round();
        // Let the fake's stalls end and destroyed sockets close.
        await until('the fake to end its stalls', () => (stalling === 0 ? true : undefined));
        let after = resources();
        let fakeAfter = await fake.connections();
        const settled = () =>
          (after.get('TCPSocketWrap') ?? 0) <= (before.get('TCPSocketWrap') ?? 0) + 4 &&
          (after.get('Timeout') ?? 0) <= (before.get('Timeout') ?? 0) + 2 &&
          fakeAfter <= fakeBefore + 4;
        for (let i = 0; i < 60 && !settled(); i++) {
          await pause(100);
          after = resources();
          fakeAfter = await fake.connections();
        }
        const summary = (m: Map<string, number>) => ({ sockets: m.get('TCPSocketWrap') ?? 0, timers: m.get('Timeout') ?? 0 });
        // Kept-alive pool sockets may stay (a few, for sequential traffic); nothing grows per fault.
        expect(summary(after).sockets, JSON.stringify({ before: summary(before), after: summary(after) })).toBeLessThanOrEqual(
          summary(before).sockets + 4,
        );
        expect(summary(after).timers, JSON.stringify({ before: summary(before), after: summary(after) })).toBeLessThanOrEqual(
          summary(before).timers + 2,
        );
        expect(fakeAfter).toBeLessThanOrEqual(fakeBefore + 4);
        expect(listeners()).toEqual(listenersBefore);
        expect(warnings.filter((w) => /MaxListeners/.test(w))).toEqual([]);
      } finally {
        process.off('warning', onWarning);
        agent.destroy();
        setFault(fake, []);
      }
    },
    120_000,
  );
});
