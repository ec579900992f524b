import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/index.js';
import type { LedgerState } from '../src/presence/ledger.js';
import { logLine, runCli, until } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { startHostRouter, type HostRouter } from './support/host-router.js';
import { jsonOf, send, type Answer, type Outgoing } from './support/http-client.js';
import { registerSecret } from './support/secrets.js';
import { realmKeyOf } from './support/realm-key.js';
import { startShim, type RunningShim } from './support/shim.js';
import { selfSignedCertificate, startTlsFront, type TlsFront } from './support/tls-front.js';

/**
 * What a proxy trusted with every user's credentials owes them (P13, E4): a caller the upstream
 * does not accept never sees shared presence or cached profile data; realms (Host values) never
 * see each other's data; upstream TLS certificates are verified unless the operator opts out,
 * loudly; a fault inside a handler costs one request a Zulip-shaped 500, never the process.
 */

const REQUEST_TIMEOUT_MS = 15_000;
const FORM = 'application/x-www-form-urlencoded';
const WRONG_KEY = registerSecret('zcs-secrets-wrong-key-0003');
const BEARER = registerSecret('zcs-secrets-bearer-token-0004');

type Modern = Record<string, { active_timestamp: number; idle_timestamp: number }>;

const form = (o: Record<string, string>) => Buffer.from(new URLSearchParams(o).toString());

function call(base: string, out: Outgoing): Promise<Answer> {
  return send(base, out, { timeoutMs: REQUEST_TIMEOUT_MS });
}

function presence(auth: Record<string, string>, params: Record<string, string>, path = '/api/v1/users/me/presence'): Outgoing {
  return { method: 'POST', path, headers: { ...auth, 'content-type': FORM }, body: form(params) };
}

describe('a caller the upstream does not accept sees no shared or cached data (P9, P13)', () => {
  let fake: FakeZulip;
  let shim: RunningShim;
  let realId: number;

  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    // A long window: every poll below is answered from the shared snapshot if it may be.
    shim = await startShim(fake.url, { presence: { coalesceMs: 60_000 } });
    const warm = await call(shim.url, presence({ authorization: fake.auth(10) }, { status: 'active', last_update_id: '-1' }));
    expect(warm.status).toBe(200);
    realId = (jsonOf(warm) as { presence_last_update_id: number }).presence_last_update_id;
    // The user list and the delivery-email lookups are cached by a valid caller's profile.
    expect((await call(shim.url, { method: 'GET', path: '/api/v1/users/me', headers: { authorization: fake.auth(11) } })).status).toBe(200);
  });
  afterAll(async () => {
    await shim?.close();
    await fake?.stop();
  });

  const user = () => fake.user(10);
  const invalid: Array<[string, () => Record<string, string>]> = [
    ['a wrong API key', () => ({ authorization: `Basic ${Buffer.from(`${user().email}:${WRONG_KEY}`).toString('base64')}` })],
    ['an unknown user', () => ({ authorization: `Basic ${Buffer.from(`nobody@zulip.example.com:${user().api_key}`).toString('base64')}` })],
    ['no Authorization', () => ({})],
    ['an Authorization that is not base64', () => ({ authorization: 'Basic %%%not-base64%%%' })],
    ['a bearer token', () => ({ authorization: `Bearer ${BEARER}` })],
  ];

  /** The upstream's own refusal, passed on (E1): an error, no presence, no user data. */
  function expectRefused(a: Answer, what: string): void {
    expect(a.status, `${what}: ${a.body.toString()}`).toBeGreaterThanOrEqual(400);
    expect(a.status, what).toBeLessThan(500);
    const body = jsonOf(a) as Record<string, unknown>;
    expect(body.result, what).toBe('error');
    for (const k of ['presences', 'presence_last_update_id', 'user_id', 'email', 'delivery_email', 'queue_id'])
      expect(body, `${what}: ${k}`).not.toHaveProperty(k);
  }

  it.each(invalid)('presence with %s: the upstream refusal, never the shared snapshot', async (_name, auth) => {
    const polls: Array<Record<string, string>> = [
      { status: 'active', last_update_id: '-1' },
      { status: 'active', last_update_id: String(realId) },
      { status: 'idle', slim_presence: 'true' },
      { status: 'active' },
      { status: 'active', ping_only: 'true' },
    ];
    for (const p of polls) expectRefused(await call(shim.url, presence(auth(), p)), JSON.stringify(p));
    expectRefused(await call(shim.url, presence(auth(), { status: 'active', last_update_id: '-1' }, '/json/users/me/presence')), '/json');
  });

  it('presence from a bot: the upstream refusal, never the shared snapshot', async () => {
    const bot = fake.users.find((u) => u.is_bot)!;
    expectRefused(await call(shim.url, presence({ authorization: fake.auth(bot) }, { status: 'active', last_update_id: '-1' })), 'bot');
  });

  it.each(invalid)('own profile and register with %s: the upstream refusal, never cached data', async (_name, auth) => {
    expectRefused(await call(shim.url, { method: 'GET', path: '/api/v1/users/me', headers: auth() }), 'own profile');
    expectRefused(
      await call(shim.url, presence(auth(), { event_types: '["presence"]', slim_presence: 'true' }, '/api/v1/register')),
      'register',
    );
  });

  it('a caller arriving while a full fetch is in flight gets its own refusal, not the data fetched', async () => {
    const fresh = await startShim(fake.url, { presence: { coalesceMs: 60_000 } });
    // The full presence fetch is held back until the intruder has its answer; reports go through.
    let release = (_: boolean) => {};
    const held = new Promise<boolean>((r) => (release = r));
    fake.override = (_req, _res, body) => {
      if (!body.toString().includes('ping_only=false')) return false;
      fake.override = undefined;
      return held;
    };
    try {
      const leader = call(fresh.url, presence({ authorization: fake.auth(12) }, { status: 'active', last_update_id: '-1' }));
      await until(
        'the full fetch to be in flight',
        () => (fake.seen.some((s) => s.body.toString().includes('ping_only=false')) ? true : undefined),
        10_000,
      );
      const intruder = await call(fresh.url, presence(invalid[0]![1](), { status: 'active', last_update_id: '-1' }));
      expectRefused(intruder, 'while in flight');
      release(false); // the fake answers the fetch itself
      const ok = await leader;
      expect(ok.status).toBe(200);
      expect(Object.keys((jsonOf(ok) as { presences: Modern }).presences)).toHaveLength(fake.humans().length);
    } finally {
      release(false);
      fake.override = undefined;
      await fresh.close();
    }
  });
});

describe('two realms on one upstream never see each other (P13)', () => {
  let a: FakeZulip;
  let b: FakeZulip;
  let router: HostRouter;
  let shim: RunningShim;
  const A = 'a.example';
  const B = 'b.example';

  beforeAll(async () => {
    a = await startFake({ era: '2.1' });
    // Realm B: another era, another clock, the same user ids with other people behind them.
    b = await startFake({ era: '5.0', now: 1_700_050_000.5 });
    for (const u of b.users) {
      u.email = u.email.replace('zulip.example.com', 'b.example.org');
      u.api_key = `b${u.api_key}`;
      u.delivery_email = `other${u.user_id}@b.example.org`;
      u.timezone = 'Asia/Tokyo';
    }
    for (const u of a.humans()) a.report(u.user_id, 'active');
    b.report(10, 'active');
    b.report(11, 'idle');
    router = await startHostRouter({ [A]: a.url, [B]: b.url });
    shim = await startShim(router.url);
  });
  afterAll(async () => {
    await shim?.close();
    await router?.close();
    await a?.stop();
    await b?.stop();
  });

  const poll = (fake: FakeZulip, host: string, params: Record<string, string>, userId = 10) =>
    call(shim.url, presence({ authorization: fake.auth(userId), host }, params));

  it('keeps ledgers, snapshots, user lists and feature levels per realm, and answers each from its own', async () => {
    // B first: its user list and snapshot are cached before A is asked anything.
    const fromB = await poll(b, B, { status: 'active', last_update_id: '-1' });
    expect(fromB.status, fromB.body.toString()).toBe(200);
    const bodyB = jsonOf(fromB) as { presences: Modern; presence_last_update_id: number; server_timestamp: number };
    expect(bodyB.server_timestamp).toBe(b.now);
    expect(Object.keys(bodyB.presences).sort()).toEqual(['10', '11']);

    const fromA = await poll(a, A, { status: 'active', last_update_id: '-1' });
    expect(fromA.status, fromA.body.toString()).toBe(200);
    const bodyA = jsonOf(fromA) as { presences: Modern; presence_last_update_id: number; server_timestamp: number };
    expect(bodyA.server_timestamp).toBe(a.now);
    expect(Object.keys(bodyA.presences).sort()).toEqual(
      a
        .humans()
        .map((u) => String(u.user_id))
        .sort(),
    );
    for (const e of Object.values(bodyA.presences)) expect(e.idle_timestamp).toBeLessThanOrEqual(Math.floor(a.now));

    const ledger = async (host: string) => (await shim.shim.context.store.load(await realmKeyOf(shim, router.url, host))) as LedgerState;
    const [la, lb] = [await ledger(A), await ledger(B)];
    expect([...la.users.keys()].sort()).toEqual(
      a
        .humans()
        .map((u) => u.user_id)
        .sort(),
    );
    expect([...lb.users.keys()].sort()).toEqual([10, 11]);
    expect(lb.users.get(10)!.active).toBe(Math.floor(b.now));

    // A's id means nothing in B: B's full data, never a delta or A's users (P5).
    const crossed = await poll(b, B, { status: 'active', last_update_id: String(bodyA.presence_last_update_id) });
    expect(Object.keys((jsonOf(crossed) as { presences: Modern }).presences).sort()).toEqual(['10', '11']);

    // A's credentials sent to B are B's to refuse.
    const wrongRealm = await poll(a, B, { status: 'active', last_update_id: '-1' });
    expect(wrongRealm.status).toBe(401);
    expect(jsonOf(wrongRealm)).not.toHaveProperty('presences');

    // Feature levels are per realm too (T2 answers from each realm's own server_settings).
    const settings = async (host: string) =>
      jsonOf(await call(shim.url, { method: 'GET', path: '/api/v1/server_settings', headers: { host } })) as Record<string, unknown>;
    expect((await settings(A)).zulip_feature_level).toBeUndefined();
    expect((await settings(B)).zulip_feature_level).toBe(122);
  });

  it("backfills own profiles from each realm's own lookups", async () => {
    const profile = async (fake: FakeZulip, host: string) =>
      jsonOf(await call(shim.url, { method: 'GET', path: '/api/v1/users/me', headers: { authorization: fake.auth(11), host } })) as Record<
        string,
        unknown
      >;
    const pb = await profile(b, B);
    const pa = await profile(a, A);
    expect(pb).toMatchObject({ user_id: 11, email: b.user(11).email, delivery_email: b.user(11).delivery_email, timezone: 'Asia/Tokyo' });
    expect(pa).toMatchObject({ user_id: 11, email: a.user(11).email, timezone: a.user(11).timezone, date_joined: a.user(11).date_joined });
  });
});

const cert = selfSignedCertificate();
const skip = 'skip' in cert ? cert.skip : undefined;

// Without openssl the tests below are reported skipped, with the reason in this title.
describe(`upstream TLS certificates are verified unless the operator opts out${skip ? ` (skipped: ${skip})` : ''}`, () => {
  let fake: FakeZulip;
  let front: TlsFront;

  beforeAll(async () => {
    if ('skip' in cert) return;
    fake = await startFake({ era: '2.1' });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    front = await startTlsFront(fake.url, cert);
  });
  afterAll(async () => {
    await front?.close();
    await fake?.stop();
  });

  const requests = (): Outgoing[] => [
    presence({ authorization: fake.auth(10) }, { status: 'active', last_update_id: '-1' }),
    { method: 'GET', path: '/api/v1/users/me', headers: { authorization: fake.auth(11) } },
    { method: 'GET', path: '/api/v1/users', headers: { authorization: fake.auth(11) } },
  ];

  it.skipIf(skip !== undefined)('refuses a self-signed upstream by default: 502, and no request reaches it', async () => {
    const shim = await startShim(front.url);
    try {
      fake.resetStats();
      for (const out of requests()) {
        const r = await call(shim.url, out);
        expect(r.status, `${out.path}: ${r.body.toString()}`).toBe(502);
        expect(jsonOf(r)).toMatchObject({ result: 'error', code: 'UPSTREAM_UNAVAILABLE' });
      }
      expect(fake.stats.requests.size).toBe(0);
    } finally {
      await shim.close();
    }
  });

  it.skipIf(skip !== undefined)('talks to it with insecureTls (the --insecure-upstream-tls flag)', async () => {
    expect(loadConfig(['--upstream', front.url], {}).config.upstream.insecureTls).toBe(false);
    expect(loadConfig(['--upstream', front.url, '--insecure-upstream-tls'], {}).config.upstream.insecureTls).toBe(true);
    expect(loadConfig(['--upstream', front.url], { UPSTREAM_INSECURE_TLS: 'true' }).config.upstream.insecureTls).toBe(true);
    const shim = await startShim(front.url, { upstream: { insecureTls: true } });
    try {
      for (const out of requests()) expect((await call(shim.url, out)).status, out.path).toBe(200);
    } finally {
      await shim.close();
    }
  });

  it.skipIf(skip !== undefined)(
    'the CLI says so at start-up when the check is off, and only then',
    async () => {
      for (const insecure of [true, false]) {
        const run = runCli([
          '--upstream',
          front.url,
          '--port',
          '0',
          '--log-level',
          'info',
          ...(insecure ? ['--insecure-upstream-tls'] : []),
        ]);
        try {
          const started = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
          const warning = logLine(run, /TLS certificates are NOT verified/);
          if (insecure) {
            expect(warning).toMatchObject({ level: 40, msg: 'upstream TLS certificates are NOT verified (--insecure-upstream-tls)' });
            const r = await fetch(new URL('/api/v1/server_settings', String(started.listen)));
            expect(r.status).toBe(200);
          } else {
            expect(warning).toBeUndefined();
          }
          run.child.kill('SIGTERM');
          expect(await run.exited).toBe(0);
        } finally {
          run.child.kill('SIGKILL');
        }
      }
    },
    90_000,
  );
});

describe('a fault inside the shim costs one request a Zulip-shaped 500, never the process (E4)', () => {
  let fake: FakeZulip;
  let shim: RunningShim;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    shim = await startShim(fake.url);
  });
  afterAll(async () => {
    await shim?.close();
    await fake?.stop();
  });

  const poll = () => call(shim.url, presence({ authorization: fake.auth(10) }, { status: 'active', last_update_id: '-1' }));
  const INTERNAL = { result: 'error', msg: 'Internal error in zulip-compat-shim', code: 'SHIM_INTERNAL_ERROR' };

  it('an exception in a handler is a 500 in Zulip shape, logged, and the shim keeps serving', async () => {
    const levels = shim.shim.context.featureLevels as { resolve: (...a: unknown[]) => Promise<unknown> };
    levels.resolve = async () => {
      throw new TypeError('a bug in a handler');
    };
    try {
      for (let i = 0; i < 3; i++) {
        const r = await poll();
        expect([r.status, jsonOf(r)]).toEqual([500, INTERNAL]);
      }
      expect(shim.logs.some((l) => l.includes('unexpected error in handler') && l.includes('a bug in a handler'))).toBe(true);
    } finally {
      delete (levels as Partial<typeof levels>).resolve; // the prototype's again
    }
    const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
    try {
      const after = await Promise.all(
        Array.from({ length: 20 }, () =>
          send(shim.url, presence({ authorization: fake.auth(11) }, { status: 'active', last_update_id: '-1' }), {
            agent,
            timeoutMs: REQUEST_TIMEOUT_MS,
          }),
        ),
      );
      expect(after.map((r) => r.status)).toEqual(Array(20).fill(200));
    } finally {
      agent.destroy();
    }
  });

  it("a failure on the shim's own paths is Zulip-shaped too (500, 405)", async () => {
    const registry = shim.shim.context.metrics.registry as { metrics: () => Promise<string> };
    registry.metrics = async () => {
      throw new Error('metrics broke');
    };
    try {
      const r = await call(shim.url, { method: 'GET', path: '/metrics' });
      expect([r.status, jsonOf(r)]).toEqual([500, INTERNAL]);
    } finally {
      delete (registry as Partial<typeof registry>).metrics;
    }
    expect((await call(shim.url, { method: 'GET', path: '/metrics' })).status).toBe(200);
    for (const path of ['/healthz', '/readyz', '/metrics']) {
      const r = await call(shim.url, { method: 'POST', path, body: Buffer.from('x') });
      expect([r.status, jsonOf(r)], path).toEqual([405, { result: 'error', msg: 'Method Not Allowed', code: 'BAD_REQUEST' }]);
    }
    expect((await poll()).status).toBe(200);
  });
});
