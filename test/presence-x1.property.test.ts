import { PresenceState } from '../src/presence/state.js';
import type { IncomingMessage } from 'node:http';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ShimContext } from '../src/context.js';
import { createLogger } from '../src/observability/logger.js';
import { modernAnswer, registerPresences } from '../src/presence/answers.js';
import { recordInLedger, type Asker } from '../src/presence/intake.js';
import { vouchesFor, type LedgerState, type ModernPresence, type Observation } from '../src/presence/ledger.js';
import type { PresenceRequest } from '../src/presence/params.js';
import type { Poll } from '../src/presence/report.js';
import { answerableDuringRefresh } from '../src/presence/sharing.js';
import type { Snapshot } from '../src/presence/snapshots.js';
import type { MemoryStore } from '../src/store/memory.js';
import type { PresenceStore } from '../src/presence/ledger-store.js';
import { memoryStore } from './support/budgets.js';

/**
 * X1 as a model: two replicas share one store (a MemoryStore standing for Redis); each keeps
 * its own copy of the realm's ledger, as new as what it last read or wrote (as RedisStore
 * does), and its own current snapshot. A model upstream changes users' presence (also
 * backdating, invisible mode, and users leaving); snapshots of it are taken and reach the
 * replicas late and in any order, or are read from the other replica (a follower). Clients
 * register and poll through either replica with the last id they got, or with a garbage id,
 * and apply every answer as a client does (replace on full data, merge on a delta). A poll may
 * also lead a refresh (B7): answered from the replica's ledger once its report is accepted, when
 * that vouches for its id (sharing.ts), its snapshot taken in later or never (a failed intake).
 * The real answer path (src/presence/answers.ts, intake.ts, ledger.ts) builds every answer.
 *
 * Checked: an id the store vouches for (any replica issued it) gets a delta from every replica;
 * every client's ids never decrease (and are never below what it sent); no user's
 * data a client holds reverts to an older upstream observation; at the end, after one fresh
 * snapshot and one poll each, every client holds exactly the upstream's data (P6).
 */

const USERS = 5;
const CLIENTS = 3;
const REPLICAS = 2;
const RUNS = 400;

type Step =
  | { t: 'change'; user: number; idle: number }
  | { t: 'backdate'; user: number }
  | { t: 'leave'; user: number }
  | { t: 'capture' }
  | { t: 'arrive'; replica: number; pick: number }
  | { t: 'follow'; replica: number }
  | { t: 'register'; replica: number; client: number }
  | { t: 'poll'; replica: number; client: number }
  | { t: 'lead'; replica: number; client: number }
  | { t: 'garbage'; replica: number; client: number; kind: number }
  | { t: 'tick'; ms: number };

const replica = fc.nat(REPLICAS - 1);
const client = fc.nat(CLIENTS - 1);
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ t: fc.constant('change' as const), user: fc.nat(USERS - 1), idle: fc.nat(60) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('backdate' as const), user: fc.nat(USERS - 1) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('leave' as const), user: fc.nat(USERS - 1) }) },
  { weight: 3, arbitrary: fc.constant({ t: 'capture' as const }) },
  { weight: 4, arbitrary: fc.record({ t: fc.constant('arrive' as const), replica, pick: fc.nat(4) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('follow' as const), replica }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('register' as const), replica, client }) },
  { weight: 8, arbitrary: fc.record({ t: fc.constant('poll' as const), replica, client }) },
  { weight: 6, arbitrary: fc.record({ t: fc.constant('lead' as const), replica, client }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('garbage' as const), replica, client, kind: fc.nat(4) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('tick' as const), ms: fc.integer({ min: 1, max: 3_000 }) }) },
);

/** One replica's view of the shared store: its own copy of the ledger, like RedisStore's. */
class ReplicaStore implements PresenceStore {
  readonly kind = 'redis' as const;
  private copy: LedgerState | undefined;

  constructor(private readonly shared: MemoryStore) {}

  private keep(s: LedgerState | undefined): LedgerState | undefined {
    this.copy = s;
    return s;
  }

  async load(realm: string) {
    return this.keep(await this.shared.load(realm));
  }
  peek() {
    return this.copy;
  }
  async merge(realm: string, observation: Observation) {
    return this.keep(await this.shared.merge(realm, observation))!;
  }
  async raiseCounter(realm: string, atLeast: number) {
    return this.keep(await this.shared.raiseCounter(realm, atLeast))!;
  }
  isAdmitted(realm: string) {
    return this.shared.isAdmitted(realm);
  }
  admit(realm: string) {
    return this.shared.admit(realm);
  }
  async ping() {}
  async close() {}
}

const log = createLogger('silent');
const realm = { upstream: 'model', host: 'model', key: 'model|model' };

function askerFor(store: PresenceStore): Asker {
  const ctx = {
    store,
    log,
    config: { upstream: { timeoutMs: 120_000 } },
    metrics: { ledgerUsers: { set() {} } },
    snapshots: { bodies: () => new Map() },
    presence: new PresenceState(100),
  } as unknown as ShimContext;
  return { ctx, req: {} as IncomingMessage, realm, era: 'exact-slim' };
}

function pollOf(asker: Asker, lastUpdateId: number | undefined): Poll {
  const request: PresenceRequest = {
    pingOnly: false,
    slimPresence: false,
    lastUpdateId,
    historyLimitDays: undefined,
    invalidBefore30: false,
    invalidFrom30: false,
    ignored: [],
    raw: new Map(),
  };
  return { ...asker, featureLevel: 185, request };
}

interface Captured {
  ts: number;
  data: Map<number, ModernPresence>;
}

interface Client {
  id: number | undefined;
  map: Map<string, ModernPresence>;
}

async function run(steps: Step[]): Promise<void> {
  let clockMs = 1_800_000_000_000;
  const shared = memoryStore(10, () => clockMs);
  const replicas = Array.from({ length: REPLICAS }, () => {
    const store = new ReplicaStore(shared);
    return { store, asker: askerFor(store), snapshot: undefined as Snapshot | undefined };
  });
  let upTime = 1_000; // the upstream's server_timestamp
  let version = 0;
  const upstream = new Map<number, ModernPresence>();
  /** Every value a user ever had → the upstream version that made it (values are unique). */
  const versionOf = new Map<string, number>();
  const key = (p: ModernPresence) => `${p.active_timestamp}/${p.idle_timestamp}`;
  const set = (user: number, p: ModernPresence) => {
    version++;
    versionOf.set(key(p), version);
    upstream.set(user, p);
  };
  const captured: Captured[] = [];
  const capture = (): Captured => {
    upTime += 1;
    const c = { ts: upTime, data: new Map([...upstream].map(([u, p]) => [u, { ...p }])) };
    captured.push(c);
    return c;
  };
  const clients: Client[] = Array.from({ length: CLIENTS }, () => ({ id: undefined, map: new Map() }));

  /** A replica takes in a snapshot (its own fetch, or one arriving late): merged, kept if newest. */
  const arrive = async (r: (typeof replicas)[number], c: Captured) => {
    const ledger = await recordInLedger(r.asker, { serverTimestamp: c.ts, presences: c.data, complete: true });
    if (!r.snapshot || r.snapshot.serverTimestamp <= c.ts) {
      r.snapshot = { serverTimestamp: c.ts, fetchedAt: 0, complete: true, modern: c.data, ledger, bodies: new Map() };
    }
  };

  const apply = (
    c: Client,
    sent: number | undefined,
    body: { presences: Record<string, ModernPresence>; presence_last_update_id: number },
    full: boolean,
  ) => {
    const id = body.presence_last_update_id;
    if (c.id !== undefined) expect(id).toBeGreaterThanOrEqual(c.id); // never backwards
    if (sent !== undefined) expect(id).toBeGreaterThanOrEqual(sent); // X1: never below what was sent
    for (const [user, p] of Object.entries(body.presences)) {
      const held = c.map.get(user);
      // No user's data reverts to an older upstream observation (P6, X1).
      if (held) expect(versionOf.get(key(p))!).toBeGreaterThanOrEqual(versionOf.get(key(held))!);
    }
    if (full) c.map = new Map(Object.entries(body.presences));
    else for (const [user, p] of Object.entries(body.presences)) c.map.set(user, p);
    c.id = id;
  };

  const pollThrough = async (r: (typeof replicas)[number], c: Client, sent: number | undefined) => {
    if (!r.snapshot) await arrive(r, capture()); // no snapshot yet: this poll fetches one
    // X1: an id the store's ledger vouches for (any replica issued it) is continued from by every replica.
    const issued = sent !== undefined && sent > 0 && vouchesFor((await shared.load(realm.key))!, sent);
    const built = await modernAnswer(pollOf(r.asker, sent), r.snapshot!);
    if (issued) expect(built.kind).toBe('delta');
    const body = JSON.parse(built.body.raw.toString('utf8'));
    apply(c, sent, body, built.kind !== 'delta');
  };

  for (const st of steps) {
    clockMs += 5;
    switch (st.t) {
      case 'change': {
        const active = 10_000 + version * 10;
        set(st.user, { active_timestamp: active, idle_timestamp: active + st.idle });
        break;
      }
      case 'backdate': {
        const backdated = 5_000 - version;
        if (upstream.has(st.user)) set(st.user, { active_timestamp: backdated, idle_timestamp: backdated });
        break;
      }
      case 'leave':
        upstream.delete(st.user);
        break;
      case 'capture':
        capture();
        break;
      case 'arrive': {
        const c = captured[captured.length - 1 - (st.pick % Math.max(captured.length, 1))];
        if (c) await arrive(replicas[st.replica]!, c);
        break;
      }
      case 'follow': {
        // A follower reads the other replica's published snapshot, and the store's ledger with it.
        const r = replicas[st.replica]!;
        const other = replicas[(st.replica + 1) % REPLICAS]!.snapshot;
        if (other && (!r.snapshot || r.snapshot.serverTimestamp <= other.serverTimestamp)) {
          r.snapshot = { ...other, modern: undefined, ledger: await r.store.load(realm.key), bodies: new Map() };
        }
        break;
      }
      case 'register': {
        const r = replicas[st.replica]!;
        const c = capture();
        const intake = {
          serverTimestamp: c.ts,
          modern: c.data,
          ledger: await recordInLedger(r.asker, { serverTimestamp: c.ts, presences: c.data, complete: true }),
        };
        const got = await registerPresences(r.asker, intake, c.data, true, undefined);
        // A register starts a client afresh: its id sequence starts again from here.
        const fresh = clients[st.client]!;
        fresh.id = undefined;
        apply(fresh, undefined, { presences: got.presences, presence_last_update_id: got.presenceLastUpdateId }, true);
        break;
      }
      case 'poll': {
        const c = clients[st.client]!;
        await pollThrough(replicas[st.replica]!, c, c.id);
        break;
      }
      case 'lead': {
        // The client's report is the replica's refresh: the snapshot it fetches is taken in
        // later ('arrive', in any order, or never), unless the client must wait for it.
        const r = replicas[st.replica]!;
        const c = clients[st.client]!;
        const fetched = capture();
        const poll = pollOf(r.asker, c.id);
        const early = await answerableDuringRefresh(poll);
        if (!early) {
          await arrive(r, fetched);
          await pollThrough(r, c, c.id);
          break;
        }
        const built = await modernAnswer(poll, early);
        expect(built.kind).toBe('delta'); // P3: only an id the ledger vouches for is answered early
        apply(c, c.id, JSON.parse(built.body.raw.toString('utf8')), false);
        break;
      }
      case 'garbage': {
        // An id the shim never issued: from the future (plausible soon, or never), before the
        // epoch, or none. The client starts again from whatever it is given.
        const c = clients[st.client]!;
        const top = (await shared.load(realm.key))?.lastId ?? 1;
        const sent = [top + 1_000_000, 2 ** 52, 7, -1, top + 1_000][st.kind]!;
        c.id = undefined;
        await pollThrough(replicas[st.replica]!, c, sent);
        break;
      }
      case 'tick':
        clockMs += st.ms;
        break;
    }
  }

  // P6 at the end: one fresh snapshot reaches both replicas, every client polls once.
  const last = capture();
  for (const r of replicas) await arrive(r, last);
  for (const [i, c] of clients.entries()) {
    await pollThrough(replicas[i % REPLICAS]!, c, c.id);
    for (const [user, p] of upstream) expect(c.map.get(String(user))).toEqual(p);
  }
}

describe('X1 model: register, polls, garbage ids and two replicas on one store', () => {
  it(`ids never go backwards, no data reverts, and clients end with the upstream's data (${RUNS} runs)`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 60, size: 'medium' }), async (steps) => {
        await run(steps);
      }),
      {
        numRuns: RUNS,
        examples: [
          // Two clients echoed the same implausible id with older full data; once the clock
          // passes it, one of them raises the counter to it: the other's delta from that id must
          // still bring the change it never got (P6, I6).
          [
            [
              { t: 'poll', replica: 0, client: 0 },
              { t: 'garbage', replica: 0, client: 1, kind: 0 },
              { t: 'change', user: 0, idle: 0 },
              { t: 'garbage', replica: 0, client: 0, kind: 0 },
              { t: 'tick', ms: 980 },
            ],
          ],
          // A garbage id (before the epoch) at a replica whose copy is older than what the client
          // saw through the other one: the full answer must not take the client back in time.
          [
            [
              { t: 'change', user: 2, idle: 0 },
              { t: 'poll', replica: 0, client: 0 },
              { t: 'backdate', user: 2 },
              { t: 'poll', replica: 1, client: 1 },
              { t: 'garbage', replica: 0, client: 1, kind: 2 },
              { t: 'capture' },
            ],
          ],
        ],
      },
    );
  });
});
