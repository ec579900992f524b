import { readFileSync } from 'node:fs';
import http from 'node:http';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import { createMetrics, EVENT_LOOP_SAMPLE_MS } from '../src/observability/metrics.js';
import { routeLabel } from '../src/http/api-routes.js';
import { upstreamObserver } from '../src/observability/upstream-metrics.js';
import { VERSION } from '../src/version.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { parsePrometheusText, sampleValue, type Exposition } from './support/prometheus-text.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * What the shim exposes at /metrics (contract Interface, GET /metrics): its own metrics only, upstream calls and client
 * requests counted by route class and status class (aborts and errors included), realm labels
 * bounded, the fast histogram rendering as prom-client's, and the metric names the docs use.
 */

const P = 'zulip_compat_shim_';

async function scrape(url: string): Promise<Exposition> {
  const res = await request(url).get('/metrics');
  expect(res.status).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  const e = parsePrometheusText(res.text);
  expect(e.errors).toEqual([]);
  return e;
}

const requests = (e: Exposition, route: string, status: string) => sampleValue(e, `${P}upstream_requests_total`, { route, status });
const answered = (e: Exposition, route: string) => sampleValue(e, `${P}upstream_request_duration_seconds_count`, { route });

// One shim over a 2.1 upstream for the /metrics and request-metrics cases: each reads deltas.
describe('a shim over a 2.1 upstream', () => {
  let fake: FakeZulip;
  let shim: RunningShim;

  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url, { upstream: { timeoutMs: 1000 } });
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });

  describe('GET /metrics', () => {
    it('is Prometheus text: the shim’s metrics prefixed, process and runtime metrics under their standard names, build info', async () => {
      const e = await scrape(shim.url);
      for (const name of e.types.keys()) expect(name.startsWith(P) || /^(process|nodejs)_/.test(name), name).toBe(true);
      for (const [name, type] of e.types) if (type === 'counter') expect(name).toMatch(/_total$/);
      // As stock Node.js dashboards and alerts name them.
      expect(e.types.get('process_cpu_user_seconds_total')).toBe('counter');
      expect(e.types.get('process_resident_memory_bytes')).toBe('gauge');
      expect(e.types.get('nodejs_heap_size_used_bytes')).toBe('gauge');
      expect(e.types.get('nodejs_eventloop_lag_p99_seconds')).toBe('gauge');
      expect([...e.types.keys()].filter((n) => n.startsWith(`${P}process_`) || n.startsWith(`${P}nodejs_`))).toEqual([]);
      expect(e.types.get(`${P}upstream_requests_total`)).toBe('counter');
      expect(e.types.get(`${P}upstream_request_duration_seconds`)).toBe('histogram');
      expect(sampleValue(e, `${P}build_info`, { version: VERSION, nodejs: process.version })).toBe(1);
    });

    it('counts pass-through requests by route and status class, and times the answered ones', async () => {
      const before = await scrape(shim.url);
      for (let i = 0; i < 3; i++) expect((await request(shim.url).get('/test/echo')).status).toBe(200);
      expect((await request(shim.url).get('/test/echo?status=503')).status).toBe(503);
      expect((await request(shim.url).get('/api/v1/messages/12345').set('Authorization', fake.auth(10))).status).toBe(404);
      expect((await request(shim.url).get('/api/v1/events?delay_ms=1').set('Authorization', fake.auth(10))).status).toBe(200);
      const after = await scrape(shim.url);

      expect(requests(after, 'other', '2xx') - requests(before, 'other', '2xx')).toBe(3);
      expect(requests(after, 'other', '5xx') - requests(before, 'other', '5xx')).toBe(1);
      expect(requests(after, 'messages', '4xx') - requests(before, 'messages', '4xx')).toBe(1);
      expect(requests(after, 'events', '2xx') - requests(before, 'events', '2xx')).toBe(1);
      expect(answered(after, 'other') - answered(before, 'other')).toBe(4);
      expect(answered(after, 'events') - answered(before, 'events')).toBe(1);
      // Label values are from the fixed set: the id in the path never becomes one.
      for (const s of after.samples) for (const v of Object.values(s.labels)) expect(v).not.toContain('12345');
    });

    it('counts the shim’s own upstream calls (intercepted server_settings)', async () => {
      const before = await scrape(shim.url);
      const res = await request(shim.url).get('/api/v1/server_settings');
      expect(res.status).toBe(200);
      expect(res.body.zulip_compat_shim).toBeTruthy();
      const after = await scrape(shim.url);
      expect(requests(after, 'server_settings', '2xx') - requests(before, 'server_settings', '2xx')).toBe(1);
      expect(answered(after, 'server_settings') - answered(before, 'server_settings')).toBe(1);
    });

    it('counts a silent upstream as a timeout, without a latency observation', async () => {
      const before = await scrape(shim.url);
      expect((await request(shim.url).get('/test/slow?ms=3000')).status).toBe(504);
      const after = await scrape(shim.url);
      expect(requests(after, 'other', 'timeout') - requests(before, 'other', 'timeout')).toBe(1);
      expect(answered(after, 'other') - answered(before, 'other')).toBe(0);
    });

    it('does not count its own paths as upstream requests', async () => {
      const before = await scrape(shim.url);
      await request(shim.url).get('/healthz');
      const after = await scrape(shim.url);
      const total = (e: Exposition) => e.samples.filter((s) => s.name === `${P}upstream_requests_total`).reduce((a, s) => a + s.value, 0);
      expect(total(after)).toBe(total(before));
    });
  });

  describe('client-facing request metrics: every request a client sent, answered or passed through', () => {
    const clientRequests = (e: Exposition, route: string, method: string, status: string) =>
      sampleValue(e, `${P}requests_total`, { route, method, status });
    const timed = (e: Exposition, route: string, method: string) => sampleValue(e, `${P}request_duration_seconds_count`, { route, method });

    it("counts every client request by route class, method and status class, the shim's own errors included", async () => {
      const before = await scrape(shim.url);
      const auth = fake.auth(10);
      expect((await request(shim.url).get('/api/v1/messages/42').set('Authorization', auth)).status).toBe(404);
      expect((await request(shim.url).get('/api/v1/users/me').set('Authorization', auth)).status).toBe(200);
      // E3: the shim's own 400, before any upstream call; invisible in the upstream metrics.
      const bad = await request(shim.url)
        .post('/api/v1/users/me/presence')
        .set('Authorization', auth)
        .type('form')
        .send({ status: 'active', last_update_id: 'abc' });
      expect(bad.status).toBe(400);
      expect((await request(shim.url).get('/test/slow?ms=3000')).status).toBe(504);
      expect((await request(shim.url).propfind('/test/echo')).status).toBe(200);
      const after = await scrape(shim.url);
      const delta = (route: string, method: string, status: string) =>
        clientRequests(after, route, method, status) - clientRequests(before, route, method, status);
      expect(delta('messages', 'GET', '4xx')).toBe(1);
      expect(delta('users_me', 'GET', '2xx')).toBe(1);
      expect(delta('presence', 'POST', '4xx')).toBe(1);
      expect(delta('other', 'GET', '5xx')).toBe(1);
      // Methods outside the fixed set share one label value: the series stay bounded.
      expect(delta('other', 'other', '2xx')).toBe(1);
      expect(timed(after, 'presence', 'POST') - timed(before, 'presence', 'POST')).toBe(1);
      // The shim's own paths (probes, scrapes) are not client traffic.
      for (const s of after.samples) if (s.name === `${P}requests_total`) expect(s.labels.route).not.toBe('healthz');
    });

    it('counts a request whose client left before the answer as aborted, without a latency observation', async () => {
      const before = await scrape(shim.url);
      const { port } = new URL(shim.url);
      const path = '/test/slow?ms=2000&aborted=1';
      const req = http.get({ host: '127.0.0.1', port, path, agent: false });
      const closed = new Promise<void>((resolve) => {
        req.on('error', () => resolve());
        req.on('close', () => resolve());
      });
      // The client leaves once its request has reached the upstream, before the answer.
      for (let i = 0; i < 100 && !fake.seen.some((r) => r.url === path); i++) await new Promise((r) => setTimeout(r, 10));
      req.destroy();
      await closed;
      let after = await scrape(shim.url);
      for (
        let i = 0;
        i < 50 && clientRequests(after, 'other', 'GET', 'aborted') === clientRequests(before, 'other', 'GET', 'aborted');
        i++
      ) {
        await new Promise((r) => setTimeout(r, 20));
        after = await scrape(shim.url);
      }
      expect(clientRequests(after, 'other', 'GET', 'aborted') - clientRequests(before, 'other', 'GET', 'aborted')).toBe(1);
      expect(timed(after, 'other', 'GET') - timed(before, 'other', 'GET')).toBe(0);
    });
  });
});

describe('upstream unreachable', () => {
  it('counts pass-through and own calls as status="error"', async () => {
    const shim = await startShim('http://127.0.0.1:1');
    try {
      expect((await request(shim.url).get('/api/v1/messages')).status).toBe(502);
      expect((await request(shim.url).get('/api/v1/server_settings')).status).toBe(502);
      const e = await scrape(shim.url);
      expect(requests(e, 'messages', 'error')).toBe(1);
      expect(requests(e, 'server_settings', 'error')).toBe(1);
    } finally {
      await shim.close();
    }
  });
});

describe('upstreamObserver', () => {
  it('counts by route label and maps outcomes to status labels', async () => {
    const m = createMetrics();
    const observe = upstreamObserver(m);
    observe(routeLabel('/api/v1/users/me/presence'), 200, 0.02);
    observe(routeLabel('/json/users/me/presence'), 200, 0.03);
    observe(routeLabel('/api/v1/users/me'), 'error', 0.001);
    const e = parsePrometheusText(await m.registry.metrics());
    expect(e.errors).toEqual([]);
    expect(requests(e, 'presence', '2xx')).toBe(2);
    expect(requests(e, 'users_me', 'error')).toBe(1);
    expect(answered(e, 'presence')).toBe(2);
    expect(answered(e, 'users_me')).toBe(0);
    expect(sampleValue(e, `${P}upstream_request_duration_seconds_bucket`, { route: 'presence', le: '0.025' })).toBe(1);
  });
});

describe('FastHistogram', () => {
  it("renders exactly as prom-client's Histogram for the same observations", async () => {
    const { Histogram, Registry } = await import('prom-client');
    const { FastHistogram } = await import('../src/observability/fast-histogram.js');
    const options = { name: 'x_seconds', help: 'x', labelNames: ['route', 'method'] as const, buckets: [0.01, 0.1, 1] };
    const [a, b] = [new Registry(), new Registry()];
    const reference = new Histogram({ ...options, registers: [a] });
    const fast = new FastHistogram({ ...options, registers: [b] });
    const child = fast.labels('presence', 'POST');
    for (const v of [0.005, 0.01, 0.05, 0.5, 2, 0.2]) {
      reference.observe({ route: 'presence', method: 'POST' }, v);
      child.observe(v);
    }
    reference.observe({ route: 'events', method: 'GET' }, 30);
    fast.observe({ route: 'events', method: 'GET' }, 30);
    expect(await b.metrics()).toBe(await a.metrics());
  });
});

describe('event loop lag', () => {
  it('is sampled every EVENT_LOOP_SAMPLE_MS, which every reading includes', async () => {
    const m = createMetrics();
    await new Promise((r) => setTimeout(r, 6 * EVENT_LOOP_SAMPLE_MS));
    const e = parsePrometheusText(await m.registry.metrics());
    // The gap between two samples is the interval, not the library's 10 ms default. Not the
    // whole interval: under load libuv's cached loop time lets a timer fire a few ms early by
    // the high-resolution clock (seen at 42.5 ms of 50 with both cores busy).
    expect(sampleValue(e, 'nodejs_eventloop_lag_min_seconds')).toBeGreaterThanOrEqual((0.6 * EVENT_LOOP_SAMPLE_MS) / 1000);
  });

  it('has an alert that fires on 200 ms of lag beyond the interval (docs/alerts.yml)', () => {
    const rules = readFileSync(resolve(import.meta.dirname, '..', 'docs/alerts.yml'), 'utf8');
    const threshold = /\bnodejs_eventloop_lag_p99_seconds > ([\d.]+)/.exec(rules)?.[1];
    expect(Number(threshold)).toBeCloseTo(0.2 + EVENT_LOOP_SAMPLE_MS / 1000, 6);
  });
});

describe('docs', () => {
  it('name only metrics the shim serves (alert rules and the deployment guide)', async () => {
    const e = parsePrometheusText(await createMetrics().registry.metrics());
    const served = new Set(e.types.keys());
    const family = (name: string) => {
      if (served.has(name)) return name;
      const base = name.replace(/_(bucket|sum|count)$/, '');
      return e.types.get(base) === 'histogram' ? base : undefined;
    };
    for (const doc of ['docs/alerts.yml', 'docs/deployment.md']) {
      const text = readFileSync(resolve(import.meta.dirname, '..', doc), 'utf8');
      const named = new Set(text.match(/\b(zulip_compat_shim|process|nodejs)_[a-z0-9_]*[a-z0-9]/g) ?? []);
      expect(named.size).toBeGreaterThan(3);
      // `zulip_compat_shim_process_*` style wildcards in prose end at the underscore.
      const missing = [...named].filter((n) => !family(n) && ![...served].some((s) => s.startsWith(`${n}_`)));
      expect({ doc, missing }).toEqual({ doc, missing: [] });
    }
  });
});

describe('bounded realm labels', () => {
  it('keeps at most MAX_REALM_LABELS realms in ledger_users, dropping the least recent', async () => {
    const { createMetrics, MAX_REALM_LABELS } = await import('../src/observability/metrics.js');
    const m = createMetrics();
    for (let i = 0; i < MAX_REALM_LABELS + 5; i++) m.ledgerUsers.set({ realm: `r${i}.example.com` }, i);
    const text = await m.registry.metrics();
    const series = text.split('\n').filter((l) => l.startsWith('zulip_compat_shim_ledger_users{'));
    expect(series).toHaveLength(MAX_REALM_LABELS);
    expect(text).not.toContain('realm="r0.example.com"');
    expect(text).toContain(`realm="r${MAX_REALM_LABELS + 4}.example.com"`);
  });
});

describe('presence bytes saved (1 - sent/full)', () => {
  it('is never below 0 with legacy clients in the mix, and positive for deltas', async () => {
    const fake = await startFake({ era: '2.1', users: 40 });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    const shim = await startShim(fake.url, { presence: { coalesceMs: 0 } });
    const poll = (form: Record<string, string>, gzip = false) => {
      const r = request(shim.url).post('/api/v1/users/me/presence').set('Authorization', fake.auth(10)).type('form');
      if (gzip) r.set('Accept-Encoding', 'gzip');
      return r.send(form);
    };
    try {
      const full = await poll({ status: 'active', last_update_id: '-1' });
      let id = full.body.presence_last_update_id as number;
      for (let i = 0; i < 5; i++) {
        await poll({ status: 'active' }, i % 2 === 0); // a legacy-format client
        await poll({ status: 'active' }); // and uncompressed
        fake.advance(120);
        fake.report(12, i % 2 ? 'active' : 'idle');
        const delta = await poll({ status: 'active', last_update_id: String(id) });
        id = delta.body.presence_last_update_id;
      }
      await poll({ status: 'active', last_update_id: '123' }); // a resync
      const kinds = ['legacy_full', 'modern_full', 'delta', 'resync'];
      const sent = (e: Exposition, kind: string) => sampleValue(e, `${P}presence_sent_bytes_total`, { kind });
      const fullBytes = (e: Exposition, kind: string) => sampleValue(e, `${P}presence_full_equivalent_bytes_total`, { kind });
      // Counted just after each answer went out.
      await expect.poll(async () => sent(await scrape(shim.url), 'resync')).toBeGreaterThan(0);
      const e = await scrape(shim.url);
      let totalSent = 0;
      let totalFull = 0;
      for (const kind of kinds) {
        expect(sent(e, kind)).toBeGreaterThan(0);
        expect(fullBytes(e, kind)).toBeGreaterThanOrEqual(sent(e, kind));
        totalSent += sent(e, kind);
        totalFull += fullBytes(e, kind);
      }
      expect(1 - totalSent / totalFull).toBeGreaterThan(0);
      // A delta saves what a full modern answer would have cost: about that answer's size each.
      expect(fullBytes(e, 'delta')).toBeGreaterThan(5 * (full.text.length - 100));
      expect(fullBytes(e, 'delta')).toBeLessThan(5 * (full.text.length + 200));
      expect(sent(e, 'delta')).toBeLessThan(fullBytes(e, 'delta') / 4);
    } finally {
      await shim.close();
      await fake.stop();
    }
  });
});
