import { afterEach, describe, expect, it, vi } from 'vitest';
import { EVENT_WAIT } from './support/wait.js';
import request from 'supertest';
import { startFake, type Era, type FakeZulip } from './support/fake-zulip.js';
import { realmKeyOf } from './support/realm-key.js';
import { startShim, type RunningShim } from './support/shim.js';
import { memoryStore } from './support/budgets.js';

/**
 * B7, P9: a delta poll whose own report is its scope's refresh (the full upstream fetch) gets
 * what that refresh brings when it is taken in quickly; a slower one does not hold it: it is
 * answered from the ledger once the upstream accepted its report, as every other delta poll
 * during a refresh is, the refresh goes on behind it, and its next poll gets what it brought
 * (P6, X1). Full and legacy polls still wait for the refresh (P3, P7).
 */

let fake: FakeZulip;
let shim: RunningShim;
afterEach(async () => {
  await shim?.close();
  await fake?.stop();
});

async function setup(era: Era, over: Parameters<typeof startShim>[1] = {}, extra: Parameters<typeof startShim>[2] = {}) {
  fake = await startFake({ era });
  for (const u of fake.humans()) fake.report(u.user_id, 'active');
  // coalesceMs 1: every poll after the last refresh leads the next one.
  shim = await startShim(fake.url, { presence: { coalesceMs: 1 }, ...over }, extra);
}

/** A presence poll, sent at once (supertest sends only once awaited). */
const pollRequest = (user: number, form: Record<string, string>) =>
  request(shim.url).post('/api/v1/users/me/presence').set('Authorization', fake.auth(user)).type('form').send(form);
const poll = (user: number, form: Record<string, string>) => pollRequest(user, form).then((r) => r);

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The answer, or 'late' when `ms` pass first. */
const within = <T>(answer: Promise<T>, ms: number): Promise<T | 'late'> => Promise.race([answer, pause(ms).then(() => 'late' as const)]);

/**
 * A slow link for the next full fetches: the head at once, the body over about a second, its
 * last part (or, with `cut`, the cut connection) held until the returned function is called.
 */
function slowLink(cut = false): () => void {
  let release!: () => void;
  const until = new Promise<void>((r) => {
    release = r;
  });
  fake.fullPresenceDrip = { ms: 1_000, until, cut };
  return () => {
    fake.fullPresenceDrip = undefined;
    release();
  };
}

/**
 * A client at `id`, and a ledger that has changes after it (users 12 and 13 reported) that
 * another caller's full poll brought in.
 */
async function clientBehindTheLedger(): Promise<{ id: number; after: Record<string, unknown> }> {
  const first = await poll(10, { status: 'active', last_update_id: '-1' });
  fake.advance(30);
  fake.report(12, 'active', 'ZulipMobile');
  await pause(5); // past the window
  const other = await poll(13, { status: 'active', last_update_id: '-1' });
  const after = { '12': other.body.presences['12'], '13': other.body.presences['13'] };
  expect(after['12']).not.toEqual(first.body.presences['12']);
  return { id: first.body.presence_last_update_id as number, after };
}

/** A change only the next refresh brings. */
async function changeUpstream(): Promise<void> {
  fake.advance(30);
  fake.report(11, 'active');
  await pause(5); // past the window: the next poll leads a refresh
}

describe.each(['2.1', '4.0'] as const)('a delta poll leading a refresh on %s (B7, P9)', (era) => {
  it('is answered from the ledger before the body of its own report ends; its next poll gets the refresh (P6, X1)', async () => {
    await setup(era);
    const { id, after } = await clientBehindTheLedger();
    await changeUpstream();
    const release = slowLink();
    const fullBefore = fake.stats.presenceFull;
    const pingsBefore = fake.stats.presencePing;
    const early = await within(poll(10, { status: 'active', last_update_id: String(id) }), 5_000);
    try {
      expect(early).not.toBe('late'); // answered while the upstream is still sending the body
      if (early === 'late') return;
      expect(early.status).toBe(200);
      // Its own report was the refresh's fetch (P9): no ping besides it.
      expect(fake.stats.presenceFull).toBe(fullBefore + 1);
      expect(fake.stats.presencePing).toBe(pingsBefore);
      // What the ledger had after its id, nothing the refresh brings yet, and on 2.1 its own
      // report (P15).
      const own = { active_timestamp: Math.floor(fake.now), idle_timestamp: Math.floor(fake.now) };
      expect(early.body.presences).toEqual(era === '2.1' ? { ...after, '10': own } : after);
      expect(early.body.presence_last_update_id).toBeGreaterThan(id);
    } finally {
      release();
    }
    const earlyId = early.body.presence_last_update_id as number;
    // A full poll waits for the refresh (joined, or its own after it): the ledger then has it.
    const full = await poll(14, { status: 'active', last_update_id: '-1' });
    expect(full.body.presences['11'].active_timestamp).toBe(Math.floor(fake.now));
    const next = await poll(10, { status: 'active', last_update_id: String(earlyId) });
    expect(next.status).toBe(200);
    expect(next.body.presence_last_update_id).toBeGreaterThan(earlyId); // X1, P6: larger ids, never older
    expect(next.body.presences['11']).toEqual(full.body.presences['11']);
    // The leader's own report: in its early answer already on 2.1 (P15), else with the refresh.
    if (era === '2.1') expect(next.body.presences).not.toHaveProperty('10');
    else expect(next.body.presences['10'].active_timestamp).toBe(Math.floor(fake.now));
    expect(next.body.presences).not.toHaveProperty('12'); // unchanged since
  });

  it('gets what its own refresh brought when the refresh is quick (P6: no answer a refresh behind)', async () => {
    await setup(era);
    const { id, after } = await clientBehindTheLedger();
    await changeUpstream();
    const fullBefore = fake.stats.presenceFull;
    const led = await poll(10, { status: 'active', last_update_id: String(id) });
    expect(led.status).toBe(200);
    expect(fake.stats.presenceFull).toBe(fullBefore + 1); // it led the refresh
    // The ledger's changes after its id, and the refresh's: user 11's new data with them.
    expect(led.body.presences['12']).toEqual(after['12']);
    expect(led.body.presences['11'].active_timestamp).toBe(Math.floor(fake.now));
  });

  it('gets what its own refresh brought when the refresh takes as long as the last one, past leaderWaitMs (a large realm)', async () => {
    await setup(era);
    const { id, after } = await clientBehindTheLedger();
    // Every full fetch now takes about 700 ms, as a large realm's does: the last refresh (the
    // other caller's, above, was quick) sets the next leader's wait, so one slow refresh first.
    fake.fullPresenceDrip = { ms: 700, until: Promise.resolve(), cut: false };
    await changeUpstream();
    await poll(13, { status: 'active', last_update_id: '-1' });
    await changeUpstream();
    fake.report(11, 'active');
    const led = await poll(10, { status: 'active', last_update_id: String(id) });
    fake.fullPresenceDrip = undefined;
    expect(led.status).toBe(200);
    // Not answered from the ledger at 200 ms: the refresh it led, with user 11's newest data.
    expect(led.body.presences['12']).toEqual(after['12']);
    expect(led.body.presences['11'].active_timestamp).toBe(Math.floor(fake.now));
  });

  it.each([401, 429])('still gets a %i on its own report as the upstream sent it (E1)', async (status) => {
    await setup(era);
    const { id } = await clientBehindTheLedger();
    await changeUpstream();
    fake.override = (_req, res, body) => {
      if (!body.toString().includes('ping_only=false')) return false;
      const text = JSON.stringify({
        result: 'error',
        msg: 'Refused by the upstream',
        code: status === 429 ? 'RATE_LIMIT_HIT' : 'UNAUTHORIZED',
      });
      res.writeHead(status, { 'content-type': 'application/json', 'retry-after': '7', 'x-upstream-own': 'yes' });
      res.end(text);
      return true;
    };
    try {
      const refused = await poll(10, { status: 'active', last_update_id: String(id) });
      expect(refused.status).toBe(status);
      expect(refused.headers['retry-after']).toBe('7');
      expect(refused.headers['x-upstream-own']).toBe('yes');
      expect(refused.body).toEqual({
        result: 'error',
        msg: 'Refused by the upstream',
        code: status === 429 ? 'RATE_LIMIT_HIT' : 'UNAUTHORIZED',
      });
    } finally {
      fake.override = undefined;
    }
  });

  it.each([
    ['a full poll', { last_update_id: '-1' }],
    ['a legacy poll', {}],
    ['a poll with an id the shim never issued', { last_update_id: '7' }],
  ])('does not answer %s before the refresh (P3, P7)', async (_name, form: Record<string, string>) => {
    await setup(era);
    await clientBehindTheLedger();
    await changeUpstream();
    const release = slowLink();
    const fullBefore = fake.stats.presenceFull;
    const answer = poll(10, { status: 'active', ...form });
    try {
      await vi.waitFor(() => expect(fake.stats.presenceFull).toBe(fullBefore + 1), EVENT_WAIT);
      // The body is all but sent by then: an early answer would have come.
      expect(await within(answer, 1_500)).toBe('late');
    } finally {
      release();
    }
    const full = await answer;
    expect(full.status).toBe(200);
    // Full data, the refresh's: user 11's change in it.
    const presences = full.body.presences as Record<string, unknown>;
    if ('last_update_id' in form) expect(presences['11']).toMatchObject({ active_timestamp: Math.floor(fake.now) });
    else expect(JSON.stringify(presences[fake.user(11).email])).toContain(`"timestamp":${Math.floor(fake.now)}`);
  });

  it('leaves a refresh that fails after its answer to the waiters, who fetch for themselves (E4)', async () => {
    await setup(era);
    const { id } = await clientBehindTheLedger();
    await changeUpstream();
    const cut = slowLink(true);
    const fullBefore = fake.stats.presenceFull;
    const early = await within(poll(10, { status: 'active', last_update_id: String(id) }), 5_000);
    const pingsBefore = fake.stats.presencePing;
    // A full poll waits for the refresh after its own ping.
    const waiter = poll(14, { status: 'active', last_update_id: '-1' });
    await vi.waitFor(() => expect(fake.stats.presencePing).toBe(pingsBefore + 1), EVENT_WAIT);
    cut();
    expect(early).not.toBe('late');
    expect(early === 'late' ? 0 : early.status).toBe(200);
    const full = await waiter;
    expect(full.status).toBe(200);
    expect(full.body.presences['11'].active_timestamp).toBe(Math.floor(fake.now));
    expect(fake.stats.presenceFull).toBe(fullBefore + 2); // the failed refresh, and the waiter's own
    await vi.waitFor(() => expect(shim.logs.join('')).toContain('presence refresh failed after its leader was answered'), EVENT_WAIT);
  });
});

describe('the refresh behind an early answer (B7)', () => {
  it('is finished by the drain, within its deadline (X9)', async () => {
    const store = memoryStore(10);
    await setup('2.1', { server: { shutdownGraceMs: 5_000 } }, { store });
    const { id } = await clientBehindTheLedger();
    await changeUpstream();
    const release = slowLink();
    const early = await within(poll(10, { status: 'active', last_update_id: String(id) }), 5_000);
    expect(early).not.toBe('late');
    const key = await realmKeyOf(shim, fake.url, new URL(shim.url).host);
    const closing = shim.close();
    // The rest of the body comes well after the server closed: the refresh must not be cut.
    await pause(300);
    release();
    await closing;
    const ledger = await store.load(key);
    expect(ledger?.users.get(11)?.active).toBe(Math.floor(fake.now));
  });

  it('is not aborted for the others when the client of a waiting leader goes away', async () => {
    await setup('2.1');
    await clientBehindTheLedger();
    await changeUpstream();
    const release = slowLink();
    const fullBefore = fake.stats.presenceFull;
    // A full poll leads the refresh, and its client gives up before the end.
    const gone = pollRequest(10, { status: 'active', last_update_id: '-1' })
      .timeout(300)
      .then(
        () => 'answered',
        () => 'gone',
      );
    await vi.waitFor(() => expect(fake.stats.presenceFull).toBe(fullBefore + 1), EVENT_WAIT);
    const pingsBefore = fake.stats.presencePing;
    const waiter = poll(14, { status: 'active', last_update_id: '-1' });
    await vi.waitFor(() => expect(fake.stats.presencePing).toBe(pingsBefore + 1), EVENT_WAIT);
    expect(await gone).toBe('gone');
    release();
    const full = await waiter;
    expect(full.status).toBe(200);
    expect(full.body.presences['11'].active_timestamp).toBe(Math.floor(fake.now));
    expect(fake.stats.presenceFull).toBe(fullBefore + 1); // one fetch, finished for the waiter
  });
});
