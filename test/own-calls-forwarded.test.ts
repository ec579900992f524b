import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { parsePrometheusText, sampleValue } from './support/prometheus-text.js';
import { startShim, type RunningShim } from './support/shim.js';
import { EVENT_WAIT } from './support/wait.js';

/**
 * X4 on the shim's own calls: the caller lookup a request makes (GET /users/me, cached per
 * caller) goes upstream as that client's: its credentials, its Host, X-Forwarded-For appended
 * with its address, and X-Forwarded-Host/Proto as the shim knows them, not as the client said
 * them from an untrusted peer. Made from the request only when the lookup is not cached.
 */

let fake: FakeZulip;
let shim: RunningShim;
afterEach(async () => {
  await shim?.close();
  await fake?.stop();
});

const callerHits = async () =>
  sampleValue(parsePrometheusText((await request(shim.url).get('/metrics')).text), 'zulip_compat_shim_lookup_cache_total', {
    cache: 'caller',
    result: 'hit',
  });
const lookups = () => fake.seen.filter((s) => s.method === 'GET' && s.url.split('?')[0] === '/api/v1/users/me');

describe('the caller lookup of an active presence report (2.1)', () => {
  it('carries the client’s credentials and forwarded headers, once per caller', async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url);
    const poll = () =>
      request(shim.url)
        .post('/api/v1/users/me/presence')
        .set('Authorization', fake.auth(10))
        .set('Host', 'chat.example.com')
        .set('X-Forwarded-For', '203.0.113.7')
        .set('X-Forwarded-Host', 'evil.example.net')
        .set('X-Forwarded-Proto', 'https')
        .type('form')
        .send({ status: 'active', last_update_id: '-1' });
    // The realm is new to the shim: the lookup is made as the check of the caller's credentials
    // (X12), and the report's own lookup of the caller (P15) is answered from it.
    expect((await poll()).status).toBe(200);
    await expect.poll(() => lookups().length, EVENT_WAIT).toBe(1);
    const h = lookups()[0]!.headers;
    expect(h.authorization).toBe(fake.auth(10));
    expect(h.host).toBe('chat.example.com');
    expect(h['x-forwarded-for']).toMatch(/^203\.0\.113\.7, .*127\.0\.0\.1$/);
    expect(h['x-forwarded-host']).toBe('chat.example.com');
    expect(h['x-forwarded-proto']).toBe('http');
    await expect.poll(() => callerHits(), EVENT_WAIT).toBe(1);
    // The same caller again: answered from the cache (its hit counted), no second lookup.
    expect((await poll()).status).toBe(200);
    await expect.poll(() => callerHits(), EVENT_WAIT).toBe(2);
    expect(lookups()).toHaveLength(1);
  });
});
