import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { changeOf, clientFamily, upstreamLevel } from '../src/observability/client-requests.js';
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

describe('the change: what the shim did, by the kind its handler recorded', () => {
  it.each([
    [undefined, 'none'],
    ['passthrough', 'none'],
    ['delta', 'presence'],
    ['store_away', 'presence'],
    ['own_profile', 'user_objects'],
    ['users', 'user_objects'],
    ['register', 'register'],
    ['app-translated', 'app'],
    ['something-new', 'other'],
  ])('%s → %s', (kind, change) => {
    expect(changeOf(kind)).toBe(change);
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

  it('counts each client request once by client family, upstream major version and change; the shim’s own paths not at all', async () => {
    const mobile = 'ZulipMobile/27.230 (Android 13)';
    const browser = 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0';
    const before = await scrape();
    const poll = await request(shim.url)
      .post('/api/v1/users/me/presence')
      .set('User-Agent', mobile)
      .set('Authorization', fake.auth(10))
      .type('form')
      .send('status=active&last_update_id=-1');
    expect(poll.body).toHaveProperty('presence_last_update_id');
    await request(shim.url).get('/api/v1/users/me').set('User-Agent', mobile).set('Authorization', fake.auth(10));
    // Passed through: the realm's level is known by now (the presence poll asked), no call for it.
    await request(shim.url).get('/test/echo').set('User-Agent', browser);
    await request(shim.url).get('/test/echo').set('User-Agent', browser);
    await request(shim.url).get('/healthz').set('User-Agent', browser);
    const after = await scrape();
    const delta = (client: string, level: string, change: string) =>
      served(after, client, level, change) - served(before, client, level, change);
    expect(delta('ZulipMobile', '2.1', 'presence')).toBe(1);
    expect(delta('ZulipMobile', '2.1', 'user_objects')).toBe(1);
    expect(delta('browser', '2.1', 'none')).toBe(2);
    const total = (e: Exposition) => e.samples.filter((s) => s.name === `${P}client_requests_total`).reduce((sum, s) => sum + s.value, 0);
    // Four client requests (the scrape before this one is counted by the next: none here, own paths are not counted).
    expect(total(after) - total(before)).toBe(4);
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
