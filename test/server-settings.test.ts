import { afterEach, describe, expect, it } from 'vitest';
import request from 'supertest';
import { VERSION } from '../src/version.js';
import { ERAS, startFake, type FakeZulip } from './support/fake-zulip.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * GET /server_settings per era (T2): the upstream's answer with one field added and its feature
 * level unchanged, its errors passed on (E1); /healthz and /readyz beside it.
 */

let fake: FakeZulip | undefined;
let shim: RunningShim | undefined;
afterEach(async () => {
  await shim?.close();
  await fake?.stop();
  shim = fake = undefined;
});

describe.each(ERAS)('GET /api/v1/server_settings on a Zulip %s upstream (T2)', (era) => {
  it('passes the answer on with one added field, zulip_feature_level unchanged', async () => {
    fake = await startFake({ era });
    shim = await startShim(fake.url);
    const direct = await request(fake.url).get('/api/v1/server_settings').set('Host', 'chat.example.com');
    const via = await request(shim.url).get('/api/v1/server_settings').set('Host', 'chat.example.com');
    expect(via.status).toBe(200);
    const { zulip_compat_shim: added, ...rest } = via.body as Record<string, unknown>;
    expect(rest).toEqual(direct.body);
    expect('zulip_feature_level' in via.body).toBe('zulip_feature_level' in direct.body);
    expect(added).toMatchObject({ version: VERSION });
    const emulated = (added as { emulated: string[] }).emulated;
    if (fake.featureLevel >= 263) expect(emulated).not.toContain('presence_last_update_id');
    else expect(emulated).toContain('presence_last_update_id');
  });
});

describe('server_settings and the shim’s own paths', () => {
  it('passes an upstream error on unchanged (E1)', async () => {
    fake = await startFake({ era: '4.0' });
    fake.override = (req, res) => {
      if (!req.url?.startsWith('/api/v1/server_settings')) return false;
      res.writeHead(503, { 'content-type': 'text/html', 'retry-after': '7' });
      res.end('<h1>Maintenance</h1>');
      return true;
    };
    shim = await startShim(fake.url);
    const r = await request(shim.url).get('/api/v1/server_settings');
    expect(r.status).toBe(503);
    expect(r.headers['retry-after']).toBe('7');
    expect(r.text).toBe('<h1>Maintenance</h1>');
  });

  it('/healthz answers while the upstream is down; /readyz only when it answers', async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url);
    expect((await request(shim.url).get('/healthz')).status).toBe(200);
    expect((await request(shim.url).get('/readyz')).status).toBe(200);
    await shim.close();
    shim = await startShim('http://127.0.0.1:1');
    expect((await request(shim.url).get('/healthz')).status).toBe(200);
    const ready = await request(shim.url).get('/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body.result).toBe('error');
  });
});
