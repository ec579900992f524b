import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IncomingMessage } from 'node:http';
import { CHANGE_IDS, CHANGES } from '../src/changes/index.js';
import { clientFamily, clientRequestCounter, upstreamLevel } from '../src/observability/client-requests.js';
import { PendingCounts } from '../src/observability/label-children.js';
import { recordChange, recordChanges } from '../src/observability/request-facts.js';
import { APP_AGENT, APP_REGISTER } from './support/mobile-app.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { parsePrometheusText, sampleValue, type Exposition } from './support/prometheus-text.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * Who is served what: zulip_compat_shim_client_requests_total{client, upstream_level, change}
 * (observability/client-requests.ts), and the store_connected and upstream_reachable gauges.
 */

const P = 'zulip_compat_shim_';

describe('client families from the User-Agent', () => {
  it.each([
    ['ZulipFlutter/0.0.30 (Android 14)', 'ZulipFlutter'],
    ['ZulipMobile/27.230 (Android 13)', 'ZulipMobile'],
    ['ZulipTerminal/0.7.0 Linux (Linux; 6.1)', 'ZulipTerminal'],
    ['ZulipPython/0.9.0 (Ubuntu; 22.04)', 'ZulipPython'],
    ['node-fetch/1.0 (+https://github.com/bitinn/node-fetch)', 'zulip-js'],
    [
      'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) ZulipElectron/5.11.1 Chrome/126.0 Electron/31.0 Safari/537.36',
      'ZulipElectron',
    ],
    ['Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:128.0) Gecko/20100101 Firefox/128.0', 'browser'],
    ['curl/8.5.0', 'other'],
    ['ZulipInvented/1.0', 'other'],
    [undefined, 'other'],
  ])('%s → %s', (agent, family) => {
    expect(clientFamily(agent)).toBe(family);
  });
});

describe('the upstream level: a feature level by Zulip major version', () => {
  it.each([
    [undefined, 'unknown'],
    [0, '2.1'],
    [1, '3'], // a 3.0 development build: listed under 3.0 in Zulip's API changelog
    [25, '3'],
    [26, '4'],
    [65, '4'],
    [122, '5'],
    [156, '6'],
    [185, '7'],
    [186, '8'],
    [237, '8'],
    [238, '9+'],
    [400, '9+'],
  ])('%s → %s', (level, major) => {
    expect(upstreamLevel(level)).toBe(major);
  });
});

describe('the change: one count per registry change a request recorded, or one none', () => {
  const counted = (record: (req: IncomingMessage) => void) => {
    const counts = new PendingCounts(['client', 'upstream_level', 'change']);
    const count = clientRequestCounter(counts, CHANGE_IDS);
    const req = { headers: { host: 'chat.example.com', 'user-agent': 'ZulipMobile/27.0' } } as unknown as IncomingMessage;
    record(req);
    count(req);
    return (change: string) => counts.of('ZulipMobile', 'unknown', change).n;
  };

  it('a request nothing was applied to counts none once', () => {
    const n = counted(() => {});
    expect(n('none')).toBe(1);
  });

  it('each change applied counts once, also when recorded twice; none not at all', () => {
    const n = counted((req) => {
      recordChange(req, 'presence_last_update_id');
      recordChanges(req, ['presence_modern_format', 'presence_last_update_id']);
    });
    expect([n('presence_last_update_id'), n('presence_modern_format'), n('none')]).toEqual([1, 1, 0]);
  });

  it('a name outside the registry counts other, so the label keeps the registry’s values', () => {
    const n = counted((req) => recordChange(req, 'made_up'));
    expect([n('other'), n('made_up')]).toEqual([1, 0]);
  });

  it('the registry’s ids are its feature names, one each, but for server behaviours (never applied)', () => {
    expect(CHANGE_IDS.size).toBe(CHANGES.filter((c) => !c.serverBehaviour).length);
    expect(CHANGE_IDS.has('invisible_mode')).toBe(false);
    expect(CHANGE_IDS.has('presence_settings')).toBe(true);
    expect(CHANGE_IDS.has('none')).toBe(false);
    expect(CHANGE_IDS.has('other')).toBe(false);
  });
});

describe('on /metrics, from a shim over a 2.1 upstream', () => {
  let fake: FakeZulip;
  let shim: RunningShim;
  const scrape = async (): Promise<Exposition> => parsePrometheusText((await request(shim.url).get('/metrics')).text);
  const served = (e: Exposition, client: string, level: string, change: string) =>
    sampleValue(e, `${P}client_requests_total`, { client, upstream_level: level, change });

  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url, { upstream: { timeoutMs: 1000 } });
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });

  it('counts a client request once per change applied, by client family and upstream major version; a pass-through once as none; the shim’s own paths not at all', async () => {
    const mobile = 'ZulipMobile/27.230 (Android 13)';
    const browser = 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0';
    const before = await scrape();
    // A modern presence poll: the shim emulates the id (P4) and the modern format (P1) on 2.1.
    const poll = await request(shim.url)
      .post('/api/v1/users/me/presence')
      .set('User-Agent', mobile)
      .set('Authorization', fake.auth(10))
      .type('form')
      .send('status=active&last_update_id=-1');
    expect(poll.body).toHaveProperty('presence_last_update_id');
    // The own profile: filled by the user-object changes above 2.1.
    const me = await request(shim.url).get('/api/v1/users/me').set('User-Agent', mobile).set('Authorization', fake.auth(10));
    expect(me.headers['x-zulip-compat-backfilled']).toContain('role');
    // Passed through: the realm's level is known by now (the presence poll asked), no call for it.
    await request(shim.url).get('/test/echo').set('User-Agent', browser);
    await request(shim.url).get('/test/echo').set('User-Agent', browser);
    await request(shim.url).get('/healthz').set('User-Agent', browser);
    const after = await scrape();
    const delta = (client: string, level: string, change: string) =>
      served(after, client, level, change) - served(before, client, level, change);
    expect(delta('ZulipMobile', '2.1', 'presence_last_update_id')).toBe(1);
    expect(delta('ZulipMobile', '2.1', 'presence_modern_format')).toBe(1);
    expect(delta('ZulipMobile', '2.1', 'presence_history_limit_days')).toBe(0); // not asked for
    for (const change of ['user_is_owner', 'user_avatar_guest_active_timezone_joined', 'user_role', 'user_delivery_email']) {
      expect(delta('ZulipMobile', '2.1', change)).toBe(1);
    }
    expect(delta('ZulipMobile', '2.1', 'none')).toBe(0);
    expect(delta('browser', '2.1', 'none')).toBe(2);
    // GET /users/{id}, which 2.1 lacks: the shim answers it from the user list (get_user_by_id).
    const user = await request(shim.url).get('/api/v1/users/11').set('User-Agent', mobile).set('Authorization', fake.auth(10));
    expect(user.status).toBe(200);
    const later = await scrape();
    expect(served(later, 'ZulipMobile', '2.1', 'get_user_by_id') - served(after, 'ZulipMobile', '2.1', 'get_user_by_id')).toBe(1);
    expect(served(later, 'ZulipMobile', '2.1', 'user_role') - served(after, 'ZulipMobile', '2.1', 'user_role')).toBe(1);
    const changesOf = (e: Exposition) =>
      e.samples
        .filter((s) => s.name === `${P}client_requests_total` && s.labels.change !== 'none' && s.value > 0)
        .map((s) => s.labels.change);
    // Every change counted is the registry's.
    for (const change of changesOf(after)) expect(CHANGE_IDS.has(change!)).toBe(true);
  });

  it('store_connected is 1 with the memory store; upstream_reachable follows the last upstream exchange', async () => {
    await request(shim.url).get('/test/echo');
    let e = await scrape();
    expect(sampleValue(e, `${P}store_connected`)).toBe(1);
    expect(sampleValue(e, `${P}upstream_reachable`)).toBe(1);
    await fake.stop();
    expect((await request(shim.url).get('/test/echo')).status).toBe(502);
    e = await scrape();
    expect(sampleValue(e, `${P}upstream_reachable`)).toBe(0);
    fake = await startFake({ era: '2.1' }); // for afterAll
  });
});

describe('on /metrics, from a shim over a 7.0 upstream that shows the mobile app feature level 277', () => {
  let fake: FakeZulip;
  let shim: RunningShim;
  beforeAll(async () => {
    // Whole answers: register carries what a 7.0 server sends (its presence settings among them).
    fake = await startFake({ era: '7.0', whole: true });
    shim = await startShim(fake.url, { app: { featureLevel: 277 } });
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });
  const counted = async (send: () => Promise<unknown>) => {
    const before = parsePrometheusText((await request(shim.url).get('/metrics')).text);
    await send();
    const after = parsePrometheusText((await request(shim.url).get('/metrics')).text);
    const out: Record<string, number> = {};
    for (const s of after.samples) {
      if (s.name !== `${P}client_requests_total`) continue;
      if (s.labels.upstream_level !== '7') continue;
      const n = s.value - sampleValue(before, s.name, s.labels);
      if (n > 0) out[`${s.labels.client} ${s.labels.change}`] = n;
    }
    return out;
  };
  const form = (path: string, agent: string, body: Record<string, string>) =>
    request(shim.url).post(path).set('User-Agent', agent).set('Authorization', fake.auth(10)).type('form').send(body);

  it('a register with presence counts the register answer’s presence id; nothing else is needed on 7.0', async () => {
    const agent = 'ZulipTerminal/0.7.0 Linux';
    const n = await counted(() => form('/api/v1/register', agent, { slim_presence: 'true', fetch_event_types: '["presence"]' }));
    expect(n).toEqual({ 'ZulipTerminal register_presence_last_update_id': 1 });
  });

  it('the app’s register counts the register-answer changes between 7.0 and the level it is shown', async () => {
    const n = await counted(() => form('/api/v1/register', APP_AGENT, APP_REGISTER));
    expect(n).toMatchObject({
      'ZulipFlutter register_presence_last_update_id': 1,
      'ZulipFlutter typing_periods': 1,
      'ZulipFlutter thumbnail_formats': 1,
    });
    expect(n).not.toHaveProperty('ZulipFlutter none');
  });

  it('the app’s requests count the changes that translated them; one no change touched counts none', async () => {
    const narrow = JSON.stringify([{ operator: 'channel', operand: 7 }]);
    const get = (path: string) => request(shim.url).get(path).set('User-Agent', APP_AGENT).set('Authorization', fake.auth(10));
    const n = await counted(() => get(`/api/v1/messages?anchor=newest&num_before=5&num_after=0&narrow=${encodeURIComponent(narrow)}`));
    expect(n).toMatchObject({ 'ZulipFlutter narrow_channel_operator': 1 });
    const typing = await counted(() => form('/api/v1/typing', APP_AGENT, { type: 'channel', stream_id: '7', topic: 'lunch', op: 'start' }));
    expect(typing).toMatchObject({ 'ZulipFlutter type_channel': 1 });
    // Its messages answer carries 7.0's wildcard flag, which the app knows by its 8.0 name.
    expect(n).toMatchObject({ 'ZulipFlutter topic_wildcard_mention': 1 });
    // A direct typing notification: 7.0 already takes it as the app sends it.
    const plain = await counted(() => form('/api/v1/typing', APP_AGENT, { type: 'direct', to: '[11]', op: 'start' }));
    expect(plain).toEqual({ 'ZulipFlutter none': 1 });
  });
});

describe('the app on 5.0: what the shim serves in the upstream’s place counts its change', () => {
  it('the emoji data URL in register, and the data at it', async () => {
    const fake = await startFake({ era: '5.0', whole: true });
    const shim = await startShim(fake.url, { app: { featureLevel: 277 } });
    try {
      const reg = await request(shim.url)
        .post('/api/v1/register')
        .set('User-Agent', APP_AGENT)
        .set('Authorization', fake.auth(10))
        .type('form')
        .send(APP_REGISTER);
      const data = await request(shim.url).get(new URL(reg.body.server_emoji_data_url).pathname).set('User-Agent', APP_AGENT);
      expect(data.status).toBe(200);
      const e = parsePrometheusText((await request(shim.url).get('/metrics')).text);
      const n = (change: string) => sampleValue(e, `${P}client_requests_total`, { client: 'ZulipFlutter', upstream_level: '5', change });
      // The register answer: the URL, and 5.0's muted topics by channel id (134); the data: its path.
      expect(n('server_emoji_data_url')).toBe(2);
      expect(n('user_topics_register')).toBe(1);
      expect(n('none')).toBe(0);
    } finally {
      await shim.close();
      await fake.stop();
    }
  });
});

describe('store_connected with a Redis store that does not answer', () => {
  it('is 0, within the probe time', async () => {
    const fake = await startFake({ era: '2.1' });
    const shim = await startShim(fake.url, { store: { redisUrl: 'redis://127.0.0.1:1' } });
    try {
      const started = performance.now();
      const e = parsePrometheusText((await request(shim.url).get('/metrics')).text);
      expect(sampleValue(e, `${P}store_connected`)).toBe(0);
      expect(performance.now() - started).toBeLessThan(3000);
    } finally {
      await shim.close();
      await fake.stop();
    }
  });
});
