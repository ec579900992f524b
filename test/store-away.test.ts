import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { STORE_AWAY_PRESENCE } from '../src/observability/store-away.js';
import type { PresenceStore } from '../src/presence/ledger-store.js';
import type { LedgerState, Observation } from '../src/presence/ledger.js';
import { withOwnReport } from '../src/presence/own-report.js';
import { StoreAwayState } from '../src/presence/store-away.js';
import type { MemoryStore } from '../src/store/memory.js';
import { StoreUnavailableError } from '../src/store/types.js';
import { memoryStore } from './support/budgets.js';
import { startFake, type Era, type FakeZulip } from './support/fake-zulip.js';
import { describeRedis, testKeyPrefix } from './support/redis.js';
import { RedisRelay } from './support/redis-relay.js';
import { pollThrough, type Modern, type PollAnswer } from './support/replica-suite.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * S3: while the shared store is away, a presence poll gets full data (the upstream's answer
 * itself, the client's own id back), never an answer that says nothing changed; when the store
 * is back, ids go on from the client's and no update is lost (X1, P6). Each replica reaches the
 * test Redis through a relay of its own, which the tests stop and start again on the same port:
 * the store is away for that replica, as in a Redis outage or a network partition.
 */

const ROOT = resolve(import.meta.dirname, '..');

describeRedis('S3: presence polls while the shared store is away', () => {
  const prefix = testKeyPrefix();
  let fake: FakeZulip;
  let replicas: RunningShim[] = [];
  let relays: RedisRelay[] = [];

  afterEach(async () => {
    await Promise.all(replicas.map((r) => r.close()));
    await Promise.all(relays.map((r) => r.stop().catch(() => {})));
    replicas = [];
    relays = [];
    await fake?.stop();
  });

  async function setup(era: Era, n: number, coalesceMs: number): Promise<void> {
    fake = await startFake({ era, users: 8 });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    for (let i = 0; i < n; i++) {
      const relay = new RedisRelay();
      await relay.start();
      relays.push(relay);
      replicas.push(await startShim(fake.url, { store: { redisUrl: relay.url, keyPrefix: prefix }, presence: { coalesceMs } }));
    }
  }

  const storeAnswers = (r: RunningShim) =>
    r.shim.context.store.ping().then(
      () => true,
      () => false,
    );
  /** Takes the store away from these replicas, and waits until each of them sees it gone. */
  async function away(which: number[]): Promise<void> {
    for (const i of which) await relays[i]!.stop();
    for (const i of which) await expect.poll(() => storeAnswers(replicas[i]!), { timeout: 10_000 }).toBe(false);
  }
  /** Brings it back on the same ports, and waits until each of them reaches it again. */
  async function back(which: number[]): Promise<void> {
    for (const i of which) await relays[i]!.start(relays[i]!.port);
    for (const i of which) await expect.poll(() => storeAnswers(replicas[i]!), { timeout: 10_000 }).toBe(true);
  }

  async function poll(replica: number, user: number, lastUpdateId: number): Promise<PollAnswer> {
    const r = await pollThrough(replicas[replica]!, fake, user, lastUpdateId);
    expect(r.status).toBe(200);
    return r.body as PollAnswer;
  }

  /** Answers by kind (presence_answers_total) of one replica. */
  async function kinds(r: RunningShim): Promise<Record<string, number>> {
    const values = (await r.shim.context.metrics.presenceAnswers.get()).values;
    return Object.fromEntries(values.map((v) => [String(v.labels.kind), v.value]));
  }

  /** A client as P6 has it: replaces its map on full data (every user of the realm), merges a delta. */
  function client(user: number) {
    const c = { user, id: -1, map: {} as Modern };
    const apply = (a: PollAnswer) => {
      expect(a.presence_last_update_id).toBeGreaterThanOrEqual(c.id); // X1: never backwards
      const full = Object.keys(a.presences).length === fake.humans().length;
      c.map = full ? { ...a.presences } : { ...c.map, ...a.presences };
      c.id = a.presence_last_update_id;
      return a;
    };
    return { c, apply };
  }

  /** Users whose reports come in while the store is away: their entries as the upstream has them now. */
  function change(users: number[]): Record<string, number> {
    fake.advance(120);
    for (const u of users) fake.report(u, 'active');
    return Object.fromEntries(users.map((u) => [String(u), Math.floor(fake.now)]));
  }

  function expectCarries(a: PollAnswer, changed: Record<string, number>, id: number): void {
    // Full data: every user of the realm, the changed ones as the upstream has them now.
    expect(Object.keys(a.presences)).toHaveLength(fake.humans().length);
    for (const [u, t] of Object.entries(changed)) expect(a.presences[u]).toEqual({ active_timestamp: t, idle_timestamp: t });
    // No id of the shim's own: the client's back.
    expect(a.presence_last_update_id).toBe(id);
  }

  it('one replica: every poll while it is away carries the upstream changes (full data, the client id back, kind store_away); then ids go on', async () => {
    await setup('5.0', 1, 0);
    const { c, apply } = client(10);
    apply(await poll(0, c.user, c.id));
    apply(await poll(0, c.user, c.id));
    const held = c.id;
    const before = await kinds(replicas[0]!);

    await away([0]);
    let changed = change([12, 13]);
    for (let i = 0; i < 3; i++) expectCarries(apply(await poll(0, c.user, c.id)), changed, held);
    changed = { ...changed, ...change([14]) };
    expectCarries(apply(await poll(0, c.user, c.id)), changed, held);
    const during = await kinds(replicas[0]!);
    expect((during.store_away ?? 0) - (before.store_away ?? 0)).toBe(4);
    expect(during.delta).toBe(before.delta); // none counted as a delta

    await back([0]);
    // The id is vouched for again: a delta from it, with every user the upstream changed meanwhile.
    const after = apply(await poll(0, c.user, c.id));
    expect(after.presence_last_update_id).toBeGreaterThan(held);
    for (const u of Object.keys(changed)) expect(after.presences).toHaveProperty(u);
    expect((await kinds(replicas[0]!)).delta).toBe((before.delta ?? 0) + 1);
    // And on from there, exactly (P6).
    const more = change([15]);
    const next = apply(await poll(0, c.user, c.id));
    expect(Object.keys(next.presences)).toContain('15');
    expect(next.presences['15']).toEqual({ active_timestamp: more['15'], idle_timestamp: more['15'] });
    expect(c.map).toEqual((await poll(0, c.user, -1)).presences); // its own report at this second changes nothing
  });

  it('one replica sharing snapshots (2.1, coalesceMs 300): polls at once and one by one carry the changes; nothing held from before', async () => {
    await setup('2.1', 1, 300);
    const clients = [10, 11, 12].map((u) => client(u));
    for (const { c, apply } of clients) apply(await poll(0, c.user, c.id));
    for (const { c, apply } of clients) apply(await poll(0, c.user, c.id));
    const ids = clients.map(({ c }) => c.id);

    await away([0]);
    for (let round = 0; round < 4; round++) {
      await new Promise((r) => setTimeout(r, 350)); // the window of the snapshot before is over
      const changed = change([13 + round]);
      // First one poll, then the others from its snapshot; from then on all at once: one leads
      // the refresh, the others join it (B7: a ledger copy answers nobody while it lacks data).
      const first = round === 0 ? [clients[0]!.apply(await poll(0, 10, clients[0]!.c.id))] : [];
      const rest = await Promise.all(clients.slice(first.length).map(({ c }) => poll(0, c.user, c.id)));
      for (const [i, a] of [...first, ...rest].entries()) expectCarries(clients[i]!.apply(a), changed, ids[i]!);
    }

    await back([0]);
    await new Promise((r) => setTimeout(r, 350));
    for (const { c, apply } of clients) {
      const a = apply(await poll(0, c.user, c.id));
      expect(a.presence_last_update_id).toBeGreaterThan(ids[clients.findIndex((x) => x.c === c)]!);
    }
    const truth = (await poll(0, 10, -1)).presences;
    for (const { c } of clients) expect(c.map).toEqual(truth);
  });

  it('two replicas, the store away from both: polls alternating between them carry the changes; then ids go on from either', async () => {
    await setup('5.0', 2, 0);
    const { c, apply } = client(10);
    apply(await poll(0, c.user, c.id));
    apply(await poll(1, c.user, c.id));
    const held = c.id;

    await away([0, 1]);
    const changed: Record<string, number> = {};
    for (let step = 0; step < 6; step++) {
      Object.assign(changed, change([11 + (step % 5)]));
      expectCarries(apply(await poll(step % 2, c.user, c.id)), changed, held);
    }
    for (const r of replicas) expect((await kinds(r)).store_away).toBe(3);

    await back([0, 1]);
    const after = apply(await poll(1, c.user, c.id));
    expect(after.presence_last_update_id).toBeGreaterThan(held);
    for (const u of Object.keys(changed)) expect(after.presences).toHaveProperty(u);
    Object.assign(changed, change([16]));
    const next = apply(await poll(0, c.user, c.id));
    expect(next.presence_last_update_id).toBeGreaterThan(after.presence_last_update_id);
    expect(Object.keys(next.presences).sort()).toEqual(['10', '16']); // and its own report (P15)
    expect(c.map).toEqual((await poll(1, c.user, -1)).presences);
  });

  it('two replicas, the store away from one: both carry the changes, the other with deltas; nothing is lost', async () => {
    await setup('5.0', 2, 0);
    const { c, apply } = client(10);
    apply(await poll(0, c.user, c.id));
    apply(await poll(1, c.user, c.id));

    await away([0]);
    for (let step = 0; step < 6; step++) {
      const changed = change([11 + (step % 5)]);
      const sent = c.id;
      const a = apply(await poll(step % 2, c.user, c.id));
      if (step % 2 === 0) expectCarries(a, changed, sent);
      else expect(a.presence_last_update_id).toBeGreaterThan(sent); // a delta from the store's ledger
      for (const [u, t] of Object.entries(changed)) expect(a.presences[u]).toEqual({ active_timestamp: t, idle_timestamp: t });
    }
    await back([0]);
    apply(await poll(0, c.user, c.id));
    expect(c.map).toEqual((await poll(1, c.user, -1)).presences);
  });

  it("a register while it is away gets the upstream's presences and -1 (R1), and its next poll full data", async () => {
    await setup('5.0', 1, 0);
    await poll(0, 10, -1);
    await away([0]);
    const changed = change([12]);
    const r = await request(replicas[0]!.url)
      .post('/api/v1/register')
      .set('Host', 'chat.example.com')
      .set('Authorization', fake.auth(11))
      .type('form')
      .send({ slim_presence: 'true', fetch_event_types: '["presence"]' });
    expect(r.status).toBe(200);
    expect(r.body.presence_last_update_id).toBe(-1);
    expect(Object.keys(r.body.presences)).toHaveLength(fake.humans().length);
    expect(r.body.presences['12']).toEqual({ active_timestamp: changed['12'], idle_timestamp: changed['12'] });
    const next = await poll(0, 11, -1);
    expect(Object.keys(next.presences)).toHaveLength(fake.humans().length);
    expect(next.presence_last_update_id).toBe(-1);
  });

  it('a poll right after a register made while it is away is not answered from the older snapshot of its window (X1)', async () => {
    await setup('5.0', 1, 60_000);
    const before = await poll(0, 10, -1); // the window's snapshot, recorded
    await away([0]);
    const changed = change([12]);
    const r = await request(replicas[0]!.url)
      .post('/api/v1/register')
      .set('Host', 'chat.example.com')
      .set('Authorization', fake.auth(11))
      .type('form')
      .send({ slim_presence: 'true', fetch_event_types: '["presence"]' });
    expect(r.body.presences['12']).toEqual({ active_timestamp: changed['12'], idle_timestamp: changed['12'] });
    const next = await poll(0, 11, r.body.presence_last_update_id);
    expect(next.server_timestamp).toBeGreaterThan(before.server_timestamp); // fetched again
    expect(next.presences['12']).toEqual(r.body.presences['12']);
  });

  it('a caller sees its own report in an answer made while it is away (P15), also from a snapshot taken before the report', async () => {
    await setup('2.1', 1, 60_000);
    await away([0]);
    const first = await poll(0, 11, -1);
    fake.advance(600);
    const own = await poll(0, 12, -1);
    expect(own.server_timestamp).toBe(first.server_timestamp); // the same snapshot
    const now = Math.floor(fake.now);
    expect(own.presences['12']).toEqual({ active_timestamp: now, idle_timestamp: now });
    expect(first.presences['12']!.active_timestamp).toBeLessThan(now);
  });

  it('says what happens, in the one wording, in its log line and its metric', async () => {
    await setup('5.0', 1, 0);
    await poll(0, 10, -1);
    await away([0]);
    await poll(0, 10, -1);
    const lines = replicas[0]!.logs.map((l) => JSON.parse(l) as { msg: string });
    expect(lines.map((l) => l.msg)).toContain(`Redis store unavailable: ${STORE_AWAY_PRESENCE}`);
    const text = await request(replicas[0]!.url).get('/metrics');
    expect(text.text).toContain(
      `# HELP zulip_compat_shim_store_errors_total Errors talking to the shared store (Redis): ${STORE_AWAY_PRESENCE}`,
    );
  });
});

/**
 * One replica's view of a shared store that can be taken away: every call fails fast while it
 * is away, as RedisStore's do while Redis is unreachable, and the replica keeps the copy it last
 * read or wrote (`peek`), as RedisStore does. Runs without Redis.
 */
class AwayStore implements PresenceStore {
  readonly kind = 'redis' as const;
  away = false;
  private readonly copies = new Map<string, LedgerState>();

  constructor(private readonly shared: MemoryStore) {}

  private async run(realm: string, op: () => Promise<LedgerState | undefined>): Promise<LedgerState | undefined> {
    if (this.away) throw new StoreUnavailableError('test: the store is away', 'unreachable');
    const s = await op();
    if (s) this.copies.set(realm, s);
    return s;
  }
  load(realm: string) {
    return this.run(realm, () => this.shared.load(realm));
  }
  async isAdmitted(realm: string) {
    if (this.away) throw new StoreUnavailableError('test: the store is away', 'unreachable');
    return this.shared.isAdmitted(realm);
  }
  async admit(realm: string) {
    if (this.away) throw new StoreUnavailableError('test: the store is away', 'unreachable');
    return this.shared.admit(realm);
  }
  peek(realm: string) {
    return this.copies.get(realm);
  }
  async merge(realm: string, o: Observation) {
    return (await this.run(realm, () => this.shared.merge(realm, o)))!;
  }
  async raiseCounter(realm: string, atLeast: number) {
    return (await this.run(realm, () => this.shared.raiseCounter(realm, atLeast)))!;
  }
  async ping() {
    if (this.away) throw new StoreUnavailableError('test: the store is away', 'unreachable');
  }
  async close() {}
}

describe('S3 without Redis: replicas on one shared store that goes away', () => {
  let fake: FakeZulip;
  let replicas: RunningShim[] = [];
  afterEach(async () => {
    await Promise.all(replicas.map((r) => r.close()));
    replicas = [];
    await fake?.stop();
  });

  it.each([1, 2])(
    '%d replica(s): every poll while it is away carries the changes (P14 kept), then ids go on and nothing is lost (P6)',
    async (n) => {
      fake = await startFake({ era: '4.0', users: 8 });
      for (const u of fake.humans()) fake.report(u.user_id, 'active');
      const shared = memoryStore(10);
      const stores = Array.from({ length: n }, () => new AwayStore(shared));
      for (const store of stores) replicas.push(await startShim(fake.url, { presence: { coalesceMs: 0 } }, { store }));
      const poll = async (i: number, id: number) => (await pollThrough(replicas[i % n]!, fake, 10, id)).body as PollAnswer;
      let id = (await poll(0, -1)).presence_last_update_id;
      id = (await poll(1, id)).presence_last_update_id;
      let map = (await poll(0, -1)).presences;

      for (const s of stores) s.away = true;
      for (let step = 0; step < 4; step++) {
        fake.advance(120);
        fake.report(11 + step, 'idle');
        const a = await poll(step, id);
        expect(a.presence_last_update_id).toBe(id); // the client's own, no id of the shim's
        expect(Object.keys(a.presences)).toHaveLength(fake.humans().length);
        expect(a.presences[String(11 + step)]!.idle_timestamp).toBe(Math.floor(fake.now));
        // P14: an idle report does not take the active time back (4.0 leaves it out of the idle row).
        expect(a.presences[String(11 + step)]!.active_timestamp).toBe(1_700_000_000);
        map = a.presences;
      }
      for (const s of stores) s.away = false;
      const after = await poll(1, id);
      expect(after.presence_last_update_id).toBeGreaterThan(id);
      for (let u = 11; u < 15; u++) expect(after.presences).toHaveProperty(String(u));
      map = { ...map, ...after.presences };
      expect(map).toEqual((await poll(0, -1)).presences);
    },
  );
});

describe('S3 pieces', () => {
  it('a realm whose ledger lacks an answer taken in answers from no copy until one at least as new is recorded', () => {
    const away = new StoreAwayState();
    away.notRecorded('r', 100);
    away.notRecorded('r', 90); // the newest missing one counts
    expect(away.ledgerBehind('r')).toBe(true);
    expect(away.ledgerBehind('other')).toBe(false);
    away.recorded('r', 95, 180);
    expect(away.ledgerBehind('r')).toBe(true);
    away.recorded('r', 100, 180);
    expect(away.ledgerBehind('r')).toBe(false);
    away.notRecorded('r', 1_000);
    away.recorded('r', 500, 180); // the upstream's clock stepped back: a new epoch (X14)
    expect(away.ledgerBehind('r')).toBe(false);
  });

  it('owes the counter the largest id echoed, once; and knows which snapshots a register overtook', () => {
    const away = new StoreAwayState();
    expect(away.takeEchoed('r')).toBeUndefined();
    away.echoedWhileAway('r', 7);
    away.echoedWhileAway('r', 5);
    expect(away.takeEchoed('r')).toBe(7);
    expect(away.takeEchoed('r')).toBeUndefined();
    away.handedOut('r', 100);
    expect(away.handedOutAfter('r', 99.5)).toBe(true);
    expect(away.handedOutAfter('r', 100)).toBe(false);
    expect(away.handedOutAfter('other', 0)).toBe(false);
  });

  it.each([
    // upstream entry, own report → shown (P15 without a ledger; never lowered, I8)
    [undefined, [50, 50], [50, 50]],
    [
      [10, 20],
      [50, 50],
      [50, 50],
    ],
    [
      [60, 70],
      [50, 50],
      [60, 70],
    ],
    [
      [10, 70],
      [50, 50],
      [50, 70],
    ],
  ] as const)('the upstream entry %j with the own report %j shows %j', (seen, report, shown) => {
    const p = (t: readonly [number, number] | undefined) => t && { active_timestamp: t[0], idle_timestamp: t[1] };
    expect(withOwnReport(p(seen), p(report)!)).toEqual(p(shown));
  });
});

describe('S3 in the docs', () => {
  const read = (path: string) => readFileSync(resolve(ROOT, path), 'utf8').replace(/\s+/g, ' ');

  it('README and docs/deployment.md say what presence does while Redis is away in the wording of the log line and the metric', () => {
    const readme = read('README.md');
    const deployment = read('docs/deployment.md');
    // The troubleshooting row, "When Redis goes away", Sentinel; "What Redis holds", the failover window.
    expect(readme.split(STORE_AWAY_PRESENCE).length - 1).toBeGreaterThanOrEqual(3);
    expect(deployment.split(STORE_AWAY_PRESENCE).length - 1).toBeGreaterThanOrEqual(3);
  });

  it('leaves none of the earlier descriptions, none of which was what happened', () => {
    const earlier = [
      'degrades to pass-through',
      'falls back to the upstream',
      'full answers, no ids',
      'answering with full data and no ids',
      'falls back to full answers',
      'degrade to full data / pass-through',
      "full answers with the client's own id",
    ];
    for (const path of ['README.md', 'docs/deployment.md', 'docs/alerts.yml', 'docs/behaviour.md', 'src/observability/metrics.ts']) {
      const text = read(path);
      for (const words of earlier) expect({ path, found: text.includes(words) }).toEqual({ path, found: false });
    }
  });
});
