import { afterEach, describe, expect, it, vi } from 'vitest';
import { EVENT_WAIT } from './support/wait.js';
import request from 'supertest';
import { ERAS, startFake, type Era, type FakeZulip } from './support/fake-zulip.js';
import { startShim, type RunningShim } from './support/shim.js';
import type { PresenceStore } from '../src/presence/ledger-store.js';
import { StoreUnavailableError } from '../src/store/types.js';

const OLD_ERAS = ERAS.filter((e) => e !== '9.0');

let fake: FakeZulip;
let shim: RunningShim;
afterEach(async () => {
  await shim?.close();
  await fake?.stop();
});

async function setup(era: Era, over: Parameters<typeof startShim>[1] = { presence: { coalesceMs: 0 } }) {
  fake = await startFake({ era });
  for (const u of fake.humans()) fake.report(u.user_id, 'active');
  shim = await startShim(fake.url, over);
}

const poll = (user: number, form: Record<string, string>, path = '/api/v1/users/me/presence') =>
  request(shim.url).post(path).set('Authorization', fake.auth(user)).type('form').send(form);

/** The web app's way: /json with a session cookie. */
const webAppPoll = (user: number) =>
  request(shim.url)
    .post('/json/users/me/presence')
    .set('Cookie', `sessionid=${fake.user(user).api_key}`)
    .type('form')
    .send({ status: 'active', last_update_id: '-1' });

type Modern = Record<string, { active_timestamp: number; idle_timestamp: number }>;

describe.each(OLD_ERAS)('presence on a Zulip %s upstream', (era) => {
  it('answers in full, then only what changed, then nothing (P1–P4, P10)', async () => {
    await setup(era);
    const full = await poll(10, { status: 'active', last_update_id: '-1' });
    expect(full.status).toBe(200);
    const presences = full.body.presences as Modern;
    expect(Object.keys(presences).sort()).toEqual(
      fake
        .humans()
        .map((u) => String(u.user_id))
        .sort(),
    );
    for (const e of Object.values(presences)) {
      expect(Number.isInteger(e.active_timestamp) && Number.isInteger(e.idle_timestamp)).toBe(true);
      expect(e.idle_timestamp).toBeGreaterThanOrEqual(e.active_timestamp);
    }
    expect(full.body.server_timestamp).toBe(fake.now);
    const id1 = full.body.presence_last_update_id as number;
    expect(Number.isSafeInteger(id1) && id1 > 0).toBe(true);

    fake.advance(120);
    fake.report(12, 'idle');
    const delta = await poll(10, { status: 'active', last_update_id: String(id1) });
    // User 10 reported again (its own poll) and 12 went idle; nobody else changed.
    expect(Object.keys(delta.body.presences).sort()).toEqual(['10', '12']);
    expect(delta.body.presences['12'].idle_timestamp).toBe(Math.floor(fake.now));
    expect(delta.body.presence_last_update_id).toBeGreaterThan(id1);

    const again = await poll(10, { status: 'active', last_update_id: String(delta.body.presence_last_update_id) });
    expect(again.body.presences).toEqual({});
    expect(again.body.presence_last_update_id).toBe(delta.body.presence_last_update_id);
  });

  it('gives legacy clients the upstream answer as made, plus presence_last_update_id (P1, P4)', async () => {
    await setup(era);
    const expected = fake.legacyPresence();
    const r = await poll(11, { status: 'active' });
    expect(r.status).toBe(200);
    // The shim's own report (user 11, active again at the same second) changes nothing.
    expect(r.body.presences).toEqual(expected);
    expect(Object.keys(r.body.presences)[0]).toMatch(/@/);
    expect(Number.isInteger(r.body.presence_last_update_id)).toBe(true);
    expect(r.body.server_timestamp).toBe(fake.now);
  });

  it('passes the legacy answer on byte for byte, the id added at the end', async () => {
    await setup(era);
    const viaShim = await poll(11, { status: 'active' });
    const direct = await request(fake.url)
      .post('/api/v1/users/me/presence')
      .set('Authorization', fake.auth(11))
      .type('form')
      .send({ status: 'active' });
    expect(viaShim.text).toBe(`${direct.text.slice(0, -1)},"presence_last_update_id":${viaShim.body.presence_last_update_id}}`);
  });

  it('answers slim_presence=true with the full modern map, never a delta', async () => {
    await setup(era);
    const r = await poll(10, { status: 'active', slim_presence: 'true' });
    expect(Object.keys(r.body.presences)).toHaveLength(fake.humans().length);
    const r2 = await poll(10, { status: 'active', slim_presence: 'true' });
    expect(Object.keys(r2.body.presences)).toHaveLength(fake.humans().length);
  });

  it('answers ping_only=true with result and msg only (P8)', async () => {
    await setup(era);
    const r = await poll(10, { status: 'idle', ping_only: 'true', last_update_id: '5' });
    expect(r.body).toEqual({ result: 'success', msg: '' });
    expect(fake.stats.presencePing).toBe(1);
    // P11 holds for pings too.
    const odd = await poll(10, { status: 'idle', ping_only: 'true', zzz: '1' });
    expect(odd.body).toEqual({ result: 'success', msg: '', ignored_parameters_unsupported: ['zzz'] });
  });

  it('passes upstream errors through unchanged (E1)', async () => {
    await setup(era);
    const bad = await request(shim.url)
      .post('/api/v1/users/me/presence')
      .set('Authorization', 'Basic eDp5')
      .type('form')
      .send({ status: 'active', last_update_id: '-1' });
    expect(bad.status).toBe(401);
    expect(bad.body.msg).toBe('Invalid API key');
    const invalid = await poll(10, { status: 'bogus', last_update_id: '-1' });
    expect(invalid.status).toBe(400);
    expect(invalid.body).toEqual({ result: 'error', msg: 'Invalid status: bogus', code: 'BAD_REQUEST' });
    const missing = await poll(10, { last_update_id: '-1' });
    expect(missing.body.code).toBe('REQUEST_VARIABLE_MISSING');
  });
});

describe('presence details', () => {
  it('rejects bad last_update_id and history_limit_days before the presence call (E3)', async () => {
    await setup('2.1');
    // The feature level decides whether the shim validates at all (X7): known after one poll.
    await poll(10, { status: 'active', last_update_id: '-1' });
    fake.resetStats();
    for (const [name, value, msg] of [
      ['last_update_id', 'abc', 'last_update_id is not valid JSON'],
      ['last_update_id', '1.5', 'last_update_id is not an integer'],
      ['last_update_id', 'true', 'last_update_id is not an integer'],
      ['history_limit_days', 'x', 'history_limit_days is not valid JSON'],
    ] as const) {
      const r = await poll(10, { status: 'active', [name]: value });
      expect(r.status).toBe(400);
      expect(r.body).toEqual({ result: 'error', msg, code: 'BAD_REQUEST' });
    }
    expect(fake.stats.requests.size).toBe(0);
  });

  it('reads multipart bodies (zulip-js) and /json with a session cookie', async () => {
    await setup('3.0');
    const m = await request(shim.url)
      .post('/api/v1/users/me/presence')
      .set('Authorization', fake.auth(10))
      .field('status', 'active')
      .field('last_update_id', '-1');
    expect(m.status).toBe(200);
    expect(Object.keys(m.body.presences)).toContain('10');
    const j = await webAppPoll(11);
    expect(j.status).toBe(200);
    expect(fake.seen.some((s) => s.url === '/json/users/me/presence')).toBe(true);
  });

  it('reads the 2.1 user list under /json for a session-cookie caller', async () => {
    await setup('2.1');
    const j = await webAppPoll(11);
    expect(j.status).toBe(200);
    expect(Object.keys(j.body.presences)).toContain('11');
    expect(fake.seen.some((s) => s.url === '/json/users')).toBe(true);
  });

  it('lists unknown parameters, never the ones the shim handles, even when a 7.0 upstream did (P11)', async () => {
    await setup('7.0');
    const r = await poll(10, { status: 'active', last_update_id: '-1', history_limit_days: '3', bogus: '1' });
    expect(r.body.ignored_parameters_unsupported).toEqual(['bogus']);
    const plain = await poll(10, { status: 'active', last_update_id: '-1' });
    expect(plain.body).not.toHaveProperty('ignored_parameters_unsupported');
    // Only parameters the upstream knows were forwarded.
    const sent = fake.seen.filter((s) => s.url.endsWith('/presence')).map((s) => new URLSearchParams(s.body.toString()));
    for (const form of sent) for (const k of form.keys()) expect(['status', 'ping_only', 'new_user_input', 'slim_presence']).toContain(k);
  });

  it('applies history_limit_days to full answers only (P12)', async () => {
    await setup('7.0');
    fake.advance(5 * 86_400);
    fake.report(10, 'active');
    const recent = await poll(10, { status: 'active', last_update_id: '-1', history_limit_days: '2' });
    expect(Object.keys(recent.body.presences)).toEqual(['10']);
    const none = await poll(10, { status: 'active', history_limit_days: '0', slim_presence: 'true' });
    expect(none.body.presences).toEqual({});
    expect(none.body.presence_last_update_id).toBe(-1);
    // An id the ledger cannot vouch for gets full data with the limit ignored, as without it.
    const all = await poll(10, { status: 'active', last_update_id: '-1' });
    const resync = await poll(10, { status: 'active', last_update_id: '3', history_limit_days: '0' });
    expect(Object.keys(resync.body.presences).sort()).toEqual(Object.keys(all.body.presences).sort());
    expect(Object.keys(all.body.presences).length).toBeGreaterThan(1);
  });

  it('applies history_limit_days to the full answer made without a ledger while the store is down (P5, P12)', async () => {
    const down = () => Promise.reject(new StoreUnavailableError('test: store down', 'unreachable'));
    const store: PresenceStore = {
      kind: 'redis',
      load: down,
      peek: () => undefined,
      merge: down,
      raiseCounter: down,
      isAdmitted: down,
      admit: down,
      ping: down,
      close: () => Promise.resolve(),
    };
    fake = await startFake({ era: '7.0' });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    fake.advance(5 * 86_400);
    fake.report(10, 'active');
    shim = await startShim(fake.url, { presence: { coalesceMs: 0 } }, { store });
    const recent = await poll(10, { status: 'active', last_update_id: '-1', history_limit_days: '2' });
    expect(recent.status).toBe(200);
    expect(Object.keys(recent.body.presences)).toEqual(['10']);
    expect(recent.body.presence_last_update_id).toBe(-1);
    const all = await poll(10, { status: 'active', last_update_id: '-1' });
    expect(Object.keys(all.body.presences).length).toBe(fake.humans().length);
    // A positive id: the limit is ignored (P12), and the full data is the whole window (P3).
    const resync = await poll(10, { status: 'active', last_update_id: '5', history_limit_days: '0' });
    expect(Object.keys(resync.body.presences).length).toBe(fake.humans().length);
    expect(resync.body.presence_last_update_id).toBe(5);
  });

  it('shows an invisible user backdated to smaller timestamps in the next delta (P6)', async () => {
    await setup('7.0');
    const full = await poll(10, { status: 'active', last_update_id: '-1' });
    fake.advance(60);
    fake.setPresenceEnabled(13, false);
    const d = await poll(10, { status: 'active', last_update_id: String(full.body.presence_last_update_id) });
    expect(d.body.presences['13'].active_timestamp).toBeLessThan(full.body.presences['13'].active_timestamp);
  });

  it('gives full data for an id it cannot vouch for, after a restart (P5)', async () => {
    await setup('2.1');
    const full = await poll(10, { status: 'active', last_update_id: '-1' });
    await shim.close();
    shim = await startShim(fake.url, { presence: { coalesceMs: 0 } });
    const r = await poll(10, { status: 'active', last_update_id: String(full.body.presence_last_update_id) });
    expect(Object.keys(r.body.presences)).toHaveLength(fake.humans().length);
    expect(r.body.presence_last_update_id).toBeGreaterThan(full.body.presence_last_update_id);
    for (const bad of ['999999999999999999', '7']) {
      const g = await poll(10, { status: 'active', last_update_id: bad });
      expect(Object.keys(g.body.presences)).toHaveLength(fake.humans().length);
    }
  });

  it.each(['7.0', '8.0'] as const)('gives a legacy answer on %s a usable id, never -1 beside data (P4)', async (era) => {
    await setup(era, { presence: { coalesceMs: 60_000 } });
    const fresh = await poll(10, { status: 'active' });
    expect(Object.keys(fresh.body.presences)).toHaveLength(fake.humans().length);
    expect(fresh.body.presence_last_update_id).toBeGreaterThan(0);
    // Within the window after a modern poll, too.
    const modern = await poll(11, { status: 'active', last_update_id: '-1' });
    fake.advance(1);
    const after = await poll(12, { status: 'active' });
    expect(after.body.presence_last_update_id).toBeGreaterThan(0);
    // Continuing from the legacy id never loses anything: full data, or a delta from a covered id.
    const next = await poll(12, { status: 'active', last_update_id: String(after.body.presence_last_update_id) });
    expect(next.body.presence_last_update_id).toBeGreaterThanOrEqual(after.body.presence_last_update_id);
    expect(modern.body.presence_last_update_id).toBeGreaterThan(0);
  });

  it('passes values the shim would reject below 9.0 on to a 9.0 upstream, which decides (X7)', async () => {
    await setup('9.0');
    for (const value of ['1e3', '05', '0x10']) {
      const r = await poll(10, { status: 'active', last_update_id: value, history_limit_days: 'abc' });
      expect(r.status).toBe(200);
      const sent = new URLSearchParams(fake.seen.at(-1)!.body.toString());
      expect(sent.get('last_update_id')).toBe(value);
      expect(sent.get('history_limit_days')).toBe('abc');
    }
  });

  it('passes presence through untouched on a 9.0 upstream', async () => {
    await setup('9.0');
    const r = await poll(10, { status: 'active', last_update_id: '-1', bogus: '1' });
    expect(r.body.presence_last_update_id).toBeLessThan(1000);
    const seen = fake.seen.at(-1)!;
    expect(new URLSearchParams(seen.body.toString()).get('bogus')).toBe('1');
  });
});

describe('user list unavailable on 2.1', () => {
  it('still answers legacy polls (E4), and modern ones with an error rather than an empty map (P3)', async () => {
    await setup('2.1');
    fake.override = (req, res) => {
      if (!req.url?.startsWith('/api/v1/users?') && req.url !== '/api/v1/users') return false;
      res.writeHead(500, { 'content-type': 'text/html' });
      res.end('<h1>Server Error</h1>');
      return true;
    };
    const legacy = await poll(10, { status: 'active' });
    expect(legacy.status).toBe(200);
    expect(legacy.body.presences).toEqual(fake.legacyPresence());
    expect(Number.isInteger(legacy.body.presence_last_update_id)).toBe(true);
    const modern = await poll(10, { status: 'active', last_update_id: '-1' });
    expect(modern.status).toBe(502);
    expect(modern.body).toMatchObject({ result: 'error', code: 'UPSTREAM_BAD_RESPONSE' });
    fake.override = undefined;
    const later = await poll(10, { status: 'active', last_update_id: '-1' });
    expect(Object.keys(later.body.presences)).toHaveLength(fake.humans().length);
  });
});

describe('compression', () => {
  it('gzips large answers for clients that accept it, and reuses the bytes', async () => {
    await setup('2.1');
    const plain = await poll(10, { status: 'active', last_update_id: '-1' });
    const zipped = await request(shim.url)
      .post('/api/v1/users/me/presence')
      .set('Authorization', fake.auth(10))
      .set('Accept-Encoding', 'gzip')
      .type('form')
      .send({ status: 'active' });
    expect(zipped.headers['content-encoding']).toBe('gzip');
    expect(zipped.headers.vary).toBe('Accept-Encoding');
    expect(zipped.body.presences).toEqual(fake.legacyPresence());
    expect(plain.headers['content-encoding']).toBeUndefined();
  });
});

describe('shared snapshots (P9)', () => {
  it('N concurrent callers: N reports upstream, one full fetch', async () => {
    await setup('2.1', { presence: { coalesceMs: 5000 } });
    await poll(10, { status: 'active', last_update_id: '-1' }); // warm the user list and feature level
    fake.resetStats();
    fake.advance(10);
    const users = fake.humans().map((u) => u.user_id);
    const answers = await Promise.all(
      Array.from({ length: 30 }, (_, i) => poll(users[i % users.length]!, { status: 'active', last_update_id: '-1' })),
    );
    for (const a of answers) expect(a.status).toBe(200);
    // The first poll's snapshot is still fresh: every caller is answered from it after its ping.
    expect(fake.stats.presenceFull).toBe(0);
    expect(fake.stats.presencePing).toBe(30);
  });

  it('on 2.1, keeps the legacy answer for the window only in a realm with legacy polls (X2); a first legacy poll fetches its own', async () => {
    await setup('2.1', { presence: { coalesceMs: 5000 } });
    await poll(10, { status: 'active', last_update_id: '-1' });
    const { snapshots, presence } = shim.shim.context;
    const held = snapshots.fresh([...presence.fetchTimes.keys()][0]!);
    expect(held?.modern?.size).toBe(fake.humans().length);
    expect(held?.legacyBytes).toBeUndefined(); // only modern polls so far: dropped once taken in
    fake.resetStats();
    const legacy = await poll(11, { status: 'active' });
    expect(legacy.status).toBe(200);
    expect(legacy.body.presences).toEqual(fake.legacyPresence());
    expect(Object.keys(legacy.body.presences)[0]).toMatch(/@/);
    expect(fake.stats.presenceFull).toBe(1); // the window's snapshot had no legacy answer to give
    // From now on the realm's snapshots keep it: the next legacy poll in the window shares it.
    fake.resetStats();
    const again = await poll(12, { status: 'active' });
    expect(again.body.presences).toEqual(fake.legacyPresence());
    expect(fake.stats.presenceFull).toBe(0);
    expect(fake.stats.presencePing).toBe(1);
  });

  it('a burst with no snapshot yet fetches once; the rest wait and ping', async () => {
    await setup('4.0', { presence: { coalesceMs: 5000 } });
    const users = fake.humans().map((u) => u.user_id);
    const answers = await Promise.all(users.map((u) => poll(u, { status: 'active', slim_presence: 'true' })));
    for (const a of answers) expect(Object.keys(a.body.presences)).toHaveLength(users.length);
    expect(fake.stats.presenceFull).toBe(1);
    expect(fake.stats.presencePing).toBe(users.length - 1);
  });

  it.each(['2.1', '4.0'] as const)(
    'on %s, delta polls are answered at once while a slow refresh is pending, and the next poll after it gets its changes (B7, X1, P6)',
    async (era) => {
      await setup(era, { presence: { coalesceMs: 1 } });
      const first = await poll(10, { status: 'active', last_update_id: '-1' });
      let id = first.body.presence_last_update_id as number;
      expect(id).toBeGreaterThan(0);
      // A slow upstream: the next full fetch is held until released, with user 11's change in it.
      let release!: () => void;
      fake.fullPresenceHeld = new Promise<void>((r) => {
        release = r;
      });
      fake.advance(30);
      fake.report(11, 'active');
      const fullBefore = fake.stats.presenceFull;
      let refreshed = false;
      const refresh = poll(12, { status: 'active', last_update_id: '-1' }).then((r) => {
        refreshed = true;
        return r;
      });
      await vi.waitFor(() => expect(fake.stats.presenceFull).toBe(fullBefore + 1), EVENT_WAIT);
      for (let i = 0; i < 3; i++) {
        const pingsBefore = fake.stats.presencePing;
        const d = await poll(10, { status: 'active', last_update_id: String(id) });
        expect(d.status).toBe(200);
        expect(refreshed).toBe(false); // answered before the fetch completed
        expect(fake.stats.presencePing).toBe(pingsBefore + 1); // its own report still went upstream (P9)
        expect(d.body.presence_last_update_id).toBeGreaterThanOrEqual(id); // X1
        id = d.body.presence_last_update_id;
      }
      // P9: still the one fetch in flight, however long it takes.
      expect(fake.stats.presenceFull).toBe(fullBefore + 1);
      release();
      fake.fullPresenceHeld = undefined;
      const full = await refresh;
      expect(full.body.presences['11'].active_timestamp).toBe(Math.floor(fake.now));
      const next = await poll(10, { status: 'active', last_update_id: String(id) });
      expect(next.body.presence_last_update_id).toBeGreaterThan(id);
      expect(next.body.presences['11']).toEqual(full.body.presences['11']);
    },
  );

  it('a caller the upstream rejects never sees shared data', async () => {
    await setup('2.1', { presence: { coalesceMs: 5000 } });
    await poll(10, { status: 'active', last_update_id: '-1' });
    const bad = await request(shim.url)
      .post('/api/v1/users/me/presence')
      .set('Authorization', 'Basic eDp5')
      .type('form')
      .send({ status: 'active', last_update_id: '-1' });
    expect(bad.status).toBe(401);
    expect(bad.body).not.toHaveProperty('presences');
  });

  it.each([
    [227, 1],
    [228, 3],
  ])(
    'at feature level %i, three callers polling at once cost %i full fetches (P9: shared below 228, per caller from it)',
    async (featureLevel, fetches) => {
      fake = await startFake({ era: '8.0', featureLevel });
      for (const u of fake.humans()) fake.report(u.user_id, 'active');
      shim = await startShim(fake.url, { presence: { coalesceMs: 5000 } });
      const answers = await Promise.all([10, 11, 12].map((u) => poll(u, { status: 'active', last_update_id: '-1' })));
      expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
      expect(fake.stats.presenceFull).toBe(fetches);
    },
  );

  it('keeps snapshots per caller where callers may see different users (feature level >= 228)', async () => {
    await setup('8.0', { presence: { coalesceMs: 5000 } });
    await Promise.all([10, 11, 12].map((u) => poll(u, { status: 'active', last_update_id: '-1' })));
    expect(fake.stats.presenceFull).toBe(3);
  });
});
