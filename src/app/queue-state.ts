import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { answerChangesFor } from '../changes/app-parts.js';
import type { QueueEventChange, QueueState } from '../changes/types.js';
import type { CacheBackend } from '../cache/shared-cache.js';
import type { LayerStateKey, ShimContext } from '../context.js';
import type { Realm } from '../upstream/realm.js';

/**
 * M2, S1: what a QueueEventChange keeps per event queue (below 134, the muted topics last sent),
 * in the shared store where there is one (Redis: every replica that serves the queue's polls
 * reads the same), else in this process. Bounded: each queue's state at most
 * QUEUE_STATE_MAX_BYTES, the process's at most MEMORY_MAX_BYTES; it expires with the queue, as
 * Zulip's does: QUEUE_STATE_TTL_MS after the queue's last poll.
 *
 * Re-deliveries: a poll names the last event the app has (`last_event_id`); the upstream sends
 * everything after it again when an answer was lost. So the state is kept as of what the app
 * has (`acked`) and as of the last answer sent (`sent`, with that answer's last event id): the
 * next poll either acknowledges it (it becomes `acked`) or gets the same events again, rebuilt
 * from `acked`, so a lost answer's changes are sent again, never lost or sent twice. Each event
 * the change rewrote is rebuilt with the time it was first seen (`seen`), so the same poll gets
 * the same bytes on any replica, whenever it comes again (an unmute's `last_updated` is that time).
 */

/**
 * Zulip's idle event queue timeout (10 minutes, which a 5.x server keeps for the app: it ignores
 * `idle_queue_timeout`), and a margin; every poll renews it.
 */
export const QUEUE_STATE_TTL_MS = 15 * 60_000;
/** One queue's state, as JSON: a larger one is not kept (its events then go on as they came, logged). */
export const QUEUE_STATE_MAX_BYTES = 256 * 1024;
/** Every queue's state in this process, without a shared store: the least recently polled go first. */
export const MEMORY_MAX_BYTES = 32 * 1024 * 1024;

interface Held {
  acked: QueueState;
  /** The last answer sent: its last event id, the state after it, and when each event it rewrote was first seen (id, seconds). */
  sent?: { upTo: number; state: QueueState; seen?: Array<[number, number]> };
}

/** A CacheBackend in this process: bounded by bytes, each value with its own time to live. */
export function memoryBackend(maxBytes = MEMORY_MAX_BYTES): CacheBackend {
  const values = new LRUCache<string, string>({
    maxSize: maxBytes,
    sizeCalculation: (json, key) => json.length + key.length,
    ttlAutopurge: false,
  });
  return {
    get: async (key) => {
      const json = values.get(key);
      return json === undefined ? undefined : { json, ttlMs: Math.max(1, values.getRemainingTTL(key)) };
    },
    set: async (key, json, ttlMs) => {
      values.set(key, json, { ttl: ttlMs });
    },
    delete: async (key) => {
      values.delete(key);
    },
  };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * `events` rewritten in place by `change` from `state` (which it moves on), each at the time it
 * was first seen (`firstSeen`, else `now`); undefined when none was rewritten, else the times of
 * those rewritten (id, seconds).
 */
function rewrite(
  events: unknown[],
  state: QueueState,
  change: QueueEventChange,
  firstSeen: ReadonlyMap<number, number>,
  now: number,
): Array<[number, number]> | undefined {
  let seen: Array<[number, number]> | undefined;
  const out: unknown[] = [];
  for (const event of events) {
    if (!isObject(event)) {
      out.push(event);
      continue;
    }
    const id = typeof event.id === 'number' ? event.id : undefined;
    const at = (id !== undefined && firstSeen.get(id)) || now;
    const up = change.up(event, state, at);
    if (up) {
      seen ??= [];
      if (id !== undefined) seen.push([id, at]);
    }
    out.push(...(up ?? [event]));
  }
  if (seen) events.splice(0, events.length, ...out);
  return seen;
}

/** The per-queue states of one shim, over one backend. */
export class QueueStates {
  constructor(
    private readonly backend: CacheBackend,
    private readonly ttlMs = QUEUE_STATE_TTL_MS,
    private readonly warn: (facts: Record<string, unknown>, msg: string) => void = () => {},
  ) {}

  /** The key of a queue's state of a change: no credential, and the queue id only hashed with the realm (P13). */
  static keyOf(realm: Realm, queueId: string, change: string): string {
    const hash = createHash('sha256').update(`${realm.key}\0${queueId}`).digest('base64url').slice(0, 22);
    return `app_queue:${change}:${hash}`;
  }

  private async save(key: string, held: Held): Promise<void> {
    const json = JSON.stringify(held);
    if (json.length > QUEUE_STATE_MAX_BYTES) {
      this.warn(
        { bytes: json.length, limit: QUEUE_STATE_MAX_BYTES },
        "app events: an event queue's state is too large to keep; its events go on as they came",
      );
      await this.backend.delete(key);
      return;
    }
    await this.backend.set(key, json, this.ttlMs);
  }

  /** A new queue's state (register). */
  async start(key: string, state: QueueState): Promise<void> {
    await this.save(key, { acked: state });
  }

  /**
   * A poll's `events` (rewritten in place) through `change`, from the state as of `lastEventId`;
   * false when the queue has no state (registered elsewhere, expired, the store away): they then
   * go on as they came. Renews the state's time to live.
   */
  async poll(key: string, lastEventId: number, events: unknown[], change: QueueEventChange, now: number): Promise<boolean> {
    const found = await this.backend.get(key);
    if (!found) return false;
    const held = JSON.parse(found.json) as Held;
    const resent = held.sent && held.sent.upTo > lastEventId ? held.sent : undefined;
    const acked = held.sent && !resent ? held.sent.state : held.acked;
    const state = structuredClone(acked);
    const seen = rewrite(events, state, change, new Map(resent?.seen), now);
    const changed = seen !== undefined;
    const last = events.at(-1);
    const upTo = isObject(last) && typeof last.id === 'number' ? last.id : lastEventId;
    const moved = JSON.stringify(state) !== JSON.stringify(acked);
    const next: Held = moved ? { acked, sent: { upTo, state, ...(seen?.length && { seen }) } } : { acked };
    if (JSON.stringify(next) !== found.json || found.ttlMs < this.ttlMs / 2) await this.save(key, next);
    return changed;
  }
}

/** What the queue states use of the shim. */
export type QueueStateContext = Pick<ShimContext, 'log' | 'store' | 'layerState'>;

/** The shim's QueueStates (context.ts LayerState). */
const QUEUE_STATES: LayerStateKey<QueueStates> = { name: "the app's event queue states" };

/** The shim's queue states: on its shared store's backend (Redis), else in this process. */
function queueStates(ctx: QueueStateContext): QueueStates {
  return ctx.layerState.of(
    QUEUE_STATES,
    () => new QueueStates(ctx.store.cacheBackend ?? memoryBackend(), QUEUE_STATE_TTL_MS, (facts, msg) => ctx.log.warn(facts, msg)),
  );
}

/** The per-queue parts of the changes between `real` and `shown`, with their changes' markers. */
function perQueueChanges(real: number, shown: number): Array<{ marker: string; change: QueueEventChange }> {
  return answerChangesFor('GET /events', real, shown).flatMap((c) => (c.perQueue ? [{ marker: c.marker, change: c.perQueue }] : []));
}

/**
 * M2, register: a new queue's state for each per-queue change, from its answer as the app gets
 * it. The store away (S3) or failing: no state, and the queue's events go on as they came.
 */
export async function startQueueStates(
  ctx: QueueStateContext,
  realm: Realm,
  answer: Record<string, unknown>,
  real: number,
  shown: number,
): Promise<void> {
  if (typeof answer.queue_id !== 'string') return;
  for (const { change } of perQueueChanges(real, shown)) {
    const state = change.start(answer);
    if (!state) continue;
    await queueStates(ctx)
      .start(QueueStates.keyOf(realm, answer.queue_id, change.name), state)
      .catch((e: unknown) => ctx.log.warn({ err: e }, "app register: an event queue's state could not be kept"));
  }
}

/** What GET /events' answer step needs: the bytes that call for reading the answer, and the step itself. */
export interface QueueStep {
  markers: readonly string[];
  /** Rewrites the answer's events through the queue's state; true when they changed. */
  run(answer: Record<string, unknown>): Promise<boolean>;
  /** An answer not read (none of the markers): the state is renewed all the same. */
  idle(): Promise<void>;
}

/**
 * M2, GET /events of the app: the step of its answer for each per-queue change between `real`
 * and `shown`; undefined where there is none or the request names no queue.
 */
export function queueStep(
  ctx: QueueStateContext,
  realm: Realm,
  query: URLSearchParams,
  real: number,
  shown: number,
): QueueStep | undefined {
  const changes = perQueueChanges(real, shown);
  const queueId = query.get('queue_id');
  const lastEventId = Number(query.get('last_event_id') ?? '-1');
  if (changes.length === 0 || queueId === null || !Number.isInteger(lastEventId)) return undefined;
  const states = queueStates(ctx);
  const run = async (events: unknown[]) => {
    let changed = false;
    for (const { change } of changes) {
      const key = QueueStates.keyOf(realm, queueId, change.name);
      const done = await states.poll(key, lastEventId, events, change, Math.floor(Date.now() / 1000)).catch((e: unknown) => {
        ctx.log.warn({ err: e }, "app events: an event queue's state could not be read; its events go on as they came");
        return false;
      });
      if (done) changed = true;
    }
    return changed;
  };
  return {
    markers: changes.flatMap(({ marker, change }) => [marker, ...change.markers]),
    run: (answer) => (Array.isArray(answer.events) ? run(answer.events) : Promise.resolve(false)),
    idle: async () => {
      await run([]);
    },
  };
}
