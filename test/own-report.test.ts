import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { startFake, type Era, type FakeZulip } from './support/fake-zulip.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * What a real client sees of its own and others' recent reports through the shim on old
 * servers: P14 (active time never moves back by an idle report), P15 (a caller sees its own
 * report, also from a shared snapshot) and P6 for a register timed by its Date header.
 */

type Modern = Record<string, { active_timestamp: number; idle_timestamp: number }>;

let fake: FakeZulip;
let shim: RunningShim | undefined;
afterEach(async () => {
  await shim?.close();
  shim = undefined;
  await fake?.stop();
});

async function setup(era: Era, coalesceMs = 60_000): Promise<void> {
  fake = await startFake({ era });
  for (const u of fake.humans()) fake.report(u.user_id, 'active');
  shim = await startShim(fake.url, { presence: { coalesceMs } });
}

const poll = (user: number, form: Record<string, string>) =>
  request(shim!.url)
    .post('/api/v1/users/me/presence')
    .set('Host', 'chat.example.com')
    .set('Authorization', fake.auth(user))
    .type('form')
    .send(form);

describe('P15: a caller sees its own report', () => {
  it('on 2.1, a full poll answered from a snapshot taken before its report shows it active as of the report', async () => {
    await setup('2.1');
    const first = await poll(11, { status: 'active', last_update_id: '-1' });
    expect(first.status).toBe(200);
    const before = (first.body.presences as Modern)['12']!;
    fake.advance(600);
    // The Python bindings' call: a guest or any user, full data, its own status active.
    const own = await poll(12, { status: 'active', last_update_id: '-1' });
    expect(own.status).toBe(200);
    expect(fake.stats.presenceFull).toBe(1); // answered from the shared snapshot
    const now = Math.floor(fake.now);
    expect((own.body.presences as Modern)['12']).toEqual({ active_timestamp: now, idle_timestamp: now });
    expect(before.active_timestamp).toBeLessThan(now);
    // Everyone else sees it too, with an id that continues exactly (P6).
    const other = await poll(11, { status: 'active', last_update_id: String(first.body.presence_last_update_id) });
    expect((other.body.presences as Modern)['12']).toEqual({ active_timestamp: now, idle_timestamp: now });
    // A report within a minute of the one recorded changes nothing a client shows (as a modern server).
    fake.advance(20);
    const again = await poll(12, { status: 'active', last_update_id: String(own.body.presence_last_update_id) });
    expect(again.body.presences).not.toHaveProperty('12');
  });

  it('an idle report is not taken for an active one', async () => {
    await setup('2.1');
    const first = await poll(11, { status: 'active', last_update_id: '-1' });
    fake.advance(600);
    const idle = await poll(12, { status: 'idle', last_update_id: '-1' });
    expect((idle.body.presences as Modern)['12']).toEqual((first.body.presences as Modern)['12']);
  });
});

describe('P15 from 3.0: only once the upstream has shown it applies the caller’s reports (invisible mode)', () => {
  const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it.each(['3.0', '7.0'] as const)('on %s', async (era) => {
    await setup(era, 300);
    const first = await poll(11, { status: 'active', last_update_id: '-1' });
    const before = (first.body.presences as Modern)['12']!;
    fake.advance(600);
    // No snapshot has shown one of its reports yet: the answer is the snapshot's.
    const unknown = await poll(12, { status: 'active', last_update_id: '-1' });
    expect((unknown.body.presences as Modern)['12']).toEqual(before);
    await pause(350);
    fake.advance(10);
    await poll(11, { status: 'active', last_update_id: '-1' }); // a snapshot that shows 12's report
    fake.advance(60);
    const shown = await poll(12, { status: 'active', last_update_id: '-1' });
    const now = Math.floor(fake.now);
    expect((shown.body.presences as Modern)['12']!.active_timestamp).toBe(now);
    // Invisible mode: the upstream accepts the reports and drops them; the shim stops taking them in.
    fake.setPresenceEnabled(12, false);
    await pause(350);
    fake.advance(10);
    await poll(11, { status: 'active', last_update_id: '-1' });
    fake.advance(60);
    const invisible = await poll(12, { status: 'active', last_update_id: '-1' });
    const p = (invisible.body.presences as Modern)['12']!;
    expect(p.active_timestamp).toBeLessThan(Math.floor(fake.now) - 140);
  });
});

describe('P14: active time never moves back by a client going idle', () => {
  it.each(['2.1', '4.0'] as const)('on %s, one client active then idle, another idle: the last active time stays', async (era) => {
    await setup(era, 0);
    fake.advance(300);
    fake.report(13, 'active', 'website');
    const seenActive = Math.floor(fake.now);
    const first = await poll(11, { status: 'active', last_update_id: '-1' });
    expect((first.body.presences as Modern)['13']!.active_timestamp).toBe(seenActive);
    // Past the anti-flap window, the same client reports idle: its row is replaced.
    fake.advance(180);
    fake.report(13, 'idle', 'website');
    const next = await poll(11, { status: 'active', last_update_id: String(first.body.presence_last_update_id) });
    expect((next.body.presences as Modern)['13']).toEqual({ active_timestamp: seenActive, idle_timestamp: Math.floor(fake.now) });
    const full = await poll(11, { status: 'active', last_update_id: '-1' });
    expect((full.body.presences as Modern)['13']!.active_timestamp).toBe(seenActive);
  });

  it('invisible mode still backdates the user (6.0)', async () => {
    await setup('6.0', 0);
    const first = await poll(11, { status: 'active', last_update_id: '-1' });
    fake.advance(60);
    fake.setPresenceEnabled(13, false);
    const next = await poll(11, { status: 'active', last_update_id: String(first.body.presence_last_update_id) });
    const p = (next.body.presences as Modern)['13']!;
    expect(p.idle_timestamp).toBe(Math.floor(fake.now) - 420);
    expect(p.active_timestamp).toBeLessThan((first.body.presences as Modern)['13']!.active_timestamp);
  });
});

describe('P14 and invisible mode: a user turning invisible is shown as the upstream has them (I8)', () => {
  // The realm is polled every five minutes meanwhile, as clients do; the last report's age is
  // below and well above the backdated row's (420 s before 7.0, 320 s from it).
  it.each([
    ['3.0', 60],
    ['3.0', 900],
    ['3.0', 7_200],
    ['7.0', 60],
    ['7.0', 900],
    ['7.0', 7_200],
  ] as const)('on %s, the last report %i s before', async (era, age) => {
    await setup(era, 0);
    const first = await poll(11, { status: 'active', last_update_id: '-1' });
    expect((first.body.presences as Modern)['13']!.active_timestamp).toBe(Math.floor(fake.now));
    let id = first.body.presence_last_update_id as number;
    for (let waited = 0; waited < age; waited += Math.min(300, age - waited)) {
      fake.advance(Math.min(300, age - waited));
      id = (await poll(11, { status: 'active', last_update_id: String(id) })).body.presence_last_update_id;
    }
    fake.setPresenceEnabled(13, false);
    // As the upstream has it: one idle row well back, no active time but date_joined.
    const upstream = fake.slimPresence().presences['13']!;
    const joined = Math.floor(Date.parse(fake.user(13).date_joined) / 1000);
    const hidden = { active_timestamp: joined, idle_timestamp: upstream.idle_timestamp };
    expect(upstream.active_timestamp ?? joined).toBe(joined);
    const delta = await poll(11, { status: 'active', last_update_id: String(id) });
    expect((delta.body.presences as Modern)['13']).toEqual(hidden);
    const full = await poll(12, { status: 'active', last_update_id: '-1' });
    expect((full.body.presences as Modern)['13']).toEqual(hidden);
  });
});

describe('P6: a register timed by its Date header is not older than a snapshot of the same second', () => {
  it('on 2.1, register right after a poll in the same second, with a report between them', async () => {
    await setup('2.1');
    fake.advance(300.1); // .35 into a second
    const first = await poll(11, { status: 'active', last_update_id: '-1' });
    expect(first.status).toBe(200);
    fake.advance(0.4); // the same second
    fake.report(13, 'active', 'ZulipMobile');
    const reg = await request(shim!.url)
      .post('/api/v1/register')
      .set('Host', 'chat.example.com')
      .set('Authorization', fake.auth(10))
      .type('form')
      .send({ slim_presence: 'true', fetch_event_types: '["presence"]' });
    expect(reg.status).toBe(200);
    const now = Math.floor(fake.now);
    expect((reg.body.presences as Modern)['13']!.active_timestamp).toBe(now);
    // And a poll after it continues from its id without taking it back (X1).
    const next = await poll(10, { status: 'active', last_update_id: String(reg.body.presence_last_update_id) });
    expect((next.body.presences as Modern)['13'] ?? (reg.body.presences as Modern)['13']).toEqual((reg.body.presences as Modern)['13']);
  });

  // Issue 43: a register below feature level 70 is dated at the end of its Date second; a poll
  // of that same second carries an earlier server_timestamp, and its changes were left out.
  it.each(['2.1', '3.0', '4.0'] as const)('on %s, a full poll in a register’s second shows that second’s changes', async (era) => {
    fake = await startFake({ era, users: 7 });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    shim = await startShim(fake.url, { presence: { coalesceMs: 0 } });
    fake.advance(600.1); // everyone's last report ten minutes old; .35 into a second
    const reg = await request(shim!.url)
      .post('/api/v1/register')
      .set('Host', 'chat.example.com')
      .set('Authorization', fake.auth(15))
      .type('form')
      .send({ slim_presence: 'true', fetch_event_types: '["presence"]' });
    expect(reg.status).toBe(200);
    expect(reg.body.server_timestamp).toBe(Math.floor(fake.now) + 0.999); // dated by its Date header
    fake.report(16, 'active', 'ZulipMobile');
    fake.advance(0.3); // the same second
    const full = await poll(15, { status: 'active', last_update_id: '-1' });
    expect(full.status).toBe(200);
    const now = Math.floor(fake.now);
    for (const user of ['15', '16'])
      expect((full.body.presences as Modern)[user], user).toEqual({ active_timestamp: now, idle_timestamp: now });
    // And a delta after it takes nothing back (X1).
    fake.advance(1);
    const next = await poll(15, { status: 'active', last_update_id: String(full.body.presence_last_update_id) });
    for (const user of ['15', '16']) {
      const p = (next.body.presences as Modern)[user];
      if (p) expect(p.active_timestamp, user).toBeGreaterThanOrEqual(now);
    }
  });
});

describe('X14: the upstream clock stepping back', () => {
  it.each(['2.1', '7.0'] as const)('on %s: changes flow again at once, every client resyncs with full data', async (era) => {
    fake = await startFake({ era });
    for (const u of [10, 11, 12]) fake.report(u, 'active');
    shim = await startShim(fake.url, { presence: { coalesceMs: 0 } });
    const first = await poll(11, { status: 'active', last_update_id: '-1' });
    const id = first.body.presence_last_update_id as number;
    expect(Object.keys(first.body.presences).sort()).toEqual(['10', '11', '12']);
    fake.now -= 3_600; // an NTP correction on the upstream
    fake.report(13, 'active', 'ZulipMobile'); // someone who comes online meanwhile
    const next = await poll(11, { status: 'active', last_update_id: String(id) });
    expect(next.status).toBe(200);
    const now = Math.floor(fake.now);
    expect((next.body.presences as Modern)['13']).toEqual({ active_timestamp: now, idle_timestamp: now });
    // Full data (the client's id is from before the step), with an id above it (X1).
    expect(Object.keys(next.body.presences).sort()).toEqual(['10', '11', '12', '13']);
    expect(next.body.presence_last_update_id).toBeGreaterThan(id);
    // And deltas from then on.
    fake.advance(60);
    fake.report(14, 'active');
    const delta = await poll(11, { status: 'active', last_update_id: String(next.body.presence_last_update_id) });
    expect(Object.keys(delta.body.presences)).toContain('14');
    expect(Object.keys(delta.body.presences)).not.toContain('10');
  });
});

describe('X13: the upstream upgraded to the modern presence API while the shim runs', () => {
  it('a client holding a shim id gets full data with the upstream’s own id, then goes on natively', async () => {
    fake = await startFake({ era: '2.1' });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    shim = await startShim(fake.url, { presence: { coalesceMs: 0 } });
    const first = await poll(11, { status: 'active', last_update_id: '-1' });
    let id = first.body.presence_last_update_id as number;
    expect(id).toBeGreaterThan(10 ** 15);
    // The upgrade: same address, now Zulip 9.0.
    Object.assign(fake as unknown as Record<string, unknown>, { era: '9.0', featureLevel: 277 });
    fake.advance(60);
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    // The shim learns it from the upstream's own answers, not only when its cached level expires.
    let polls = 0;
    for (let i = 0; i < 3 && id > 10 ** 15; i++) {
      polls++;
      const r = await poll(11, { status: 'active', last_update_id: String(id), history_limit_days: '0' });
      expect(r.status).toBe(200);
      if ((r.body.presence_last_update_id as number) < 10 ** 15) {
        // Handed over: everyone, with the upstream's own id (history_limit_days ignored, as for the positive id sent).
        expect(Object.keys(r.body.presences).length).toBe(fake.humans().length);
      }
      id = r.body.presence_last_update_id as number;
    }
    expect(id).toBeLessThan(10 ** 15);
    // The first poll after the upgrade shows it (its answer carries the server's own id); the next is handed over.
    expect(polls).toBe(2);
    fake.advance(60);
    fake.report(14, 'active');
    const native = await poll(11, { status: 'active', last_update_id: String(id) });
    expect(Object.keys(native.body.presences)).toContain('14');
    expect(native.body.presence_last_update_id).toBeGreaterThan(id);
    const sent = fake.seen.filter((r) => r.url.endsWith('/users/me/presence')).at(-1)!;
    expect(new URLSearchParams(sent.body.toString()).get('last_update_id')).toBe(String(id)); // passed on as it came
  });
});
