import { defaultParsePool } from '../src/parse/parse-worker.js';
import { testConfig } from './support/shim.js';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import type { LedgerState } from '../src/presence/ledger.js';
import { SnapshotHub, type Snapshot } from '../src/presence/snapshots.js';
import { ledgerFootprint, MemoryStore } from '../src/store/memory.js';
import { bytesOf } from '../src/cache/budgeted.js';
import { SharedCache } from '../src/cache/shared-cache.js';
import { createLogger } from '../src/observability/logger.js';
import { createMetrics } from '../src/observability/metrics.js';
import { UpstreamClient } from '../src/upstream/client.js';
import { UserDirectory, USER_LIST_MIN_REFRESH_MS } from '../src/upstream/user-directory.js';
import { startShim, type RunningShim } from './support/shim.js';
import { SyntheticZulip } from './support/synthetic-zulip.js';
import { BUDGETS } from './support/budgets.js';

/** The default budgets of the user directory, from the configuration. */
const { userDirectoriesBytes: maxBytes, largeAnswerBytes: maxAnswerBytes } = testConfig('http://127.0.0.1:1').memory;
const DIRECTORY_BUDGETS = { maxBytes, maxAnswerBytes };

/**
 * X2: every cache and per-realm structure evicts within a byte budget, and an unknown realm
 * costs the upstream one server_settings call per window. (The process-wide figure under a
 * flood of hosts is in memory-flood.test.ts.)
 */

const presences = (n: number) => new Map(Array.from({ length: n }, (_, i) => [i + 1, { active_timestamp: 1, idle_timestamp: 2 }]));

describe('byte budgets', () => {
  it('MemoryStore keeps ledgers within maxBytes, least recently used out first; one too large is said once', async () => {
    const told: number[] = [];
    const perRealm = bytesOf(ledgerFootprint({ users: presences(100), raised: [] } as unknown as LedgerState));
    const store = new MemoryStore({ maxRealms: 1000, maxBytes: perRealm * 3, onTooLarge: (_r, bytes) => told.push(bytes) });
    for (const realm of ['a', 'b', 'c', 'd']) await store.merge(realm, { serverTimestamp: 1, presences: presences(100), complete: true });
    expect(await store.load('a')).toBeUndefined();
    expect(await store.load('d')).toBeDefined();
    await store.merge('big', { serverTimestamp: 1, presences: presences(400), complete: true });
    await store.merge('big2', { serverTimestamp: 1, presences: presences(400), complete: true });
    expect(told).toHaveLength(1);
    expect(await store.load('big')).toBeUndefined();
  });

  it('SnapshotHub keeps snapshots within maxBytes, sized by the bytes they hold', async () => {
    const hub = new SnapshotHub(60_000, 100, Date.now, 1.5 * 1024 * 1024, BUDGETS.answersBytes);
    const big = (): Snapshot => ({
      serverTimestamp: 1,
      fetchedAt: Date.now(),
      complete: true,
      modern: new Map(),
      legacyBytes: Buffer.alloc(600 * 1024),
      merged: undefined,
      bodies: new Map(),
    });
    for (const scope of ['a', 'b', 'c', 'd']) await hub.lead(scope, async () => big());
    expect(hub.fresh('a')).toBeUndefined();
    expect(hub.fresh('d')).toBeDefined();
  });

  it('SharedCache keeps values within maxBytes (each sized by its footprint)', async () => {
    const cache = new SharedCache<string>({
      name: 'x',
      ttlMs: 60_000,
      max: 1000,
      maxBytes: 20_000,
      footprint: (v) => ({ fixed: 0, strings: [v] }),
      load: async (key) => key.padEnd(3000, '.'),
    });
    const loads: string[] = [];
    const get = async (k: string) => {
      loads.push(k);
      return cache.get(k, undefined);
    };
    for (const k of ['a', 'b', 'c', 'd']) await get(k);
    const before = loads.length;
    // 'd' is still held (no load); 'a' was evicted.
    expect((await cache.get('d', undefined)).length).toBe(3000);
    expect(loads.length).toBe(before);
  });
});

describe('unknown realms (X2)', () => {
  let upstream: http.Server | undefined;
  let shim: RunningShim | undefined;
  afterEach(async () => {
    await shim?.close();
    upstream?.closeAllConnections();
    await new Promise((r) => (upstream ? upstream.close(r) : r(undefined)));
    shim = undefined;
    upstream = undefined;
  });

  it('a Host the upstream refuses costs one server_settings call per window, authenticated or not', async () => {
    const settingsCalls = new Map<string, number>();
    upstream = http.createServer((req, res) => {
      const host = req.headers.host ?? '';
      if (req.url?.startsWith('/api/v1/server_settings')) settingsCalls.set(host, (settingsCalls.get(host) ?? 0) + 1);
      res.writeHead(host.startsWith('known') ? 200 : 404, { 'content-type': 'application/json' });
      res.end(
        host.startsWith('known') ? '{"result":"success","msg":""}' : '{"result":"error","msg":"Invalid subdomain","code":"BAD_REQUEST"}',
      );
    });
    await new Promise<void>((r) => upstream!.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    shim = await startShim(url);
    for (let i = 0; i < 20; i++) {
      const r = request(shim.url)
        .post('/api/v1/users/me/presence')
        .set('Host', `made-up-${i % 4}.example`)
        .type('form');
      const answer = await (i % 2 ? r.set('Authorization', 'Basic eDp5') : r).send({ status: 'active' });
      // E1: the upstream's own refusal, remembered (X2), not an error of the shim's.
      expect(answer.status).toBe(404);
      expect(answer.body).toEqual({ result: 'error', msg: 'Invalid subdomain', code: 'BAD_REQUEST' });
    }
    expect([...settingsCalls.values()]).toEqual([1, 1, 1, 1]);
  });
  it('a remembered refusal counts its answer in memory.featureLevelsBytes: a second Host evicts the first', async () => {
    const settingsCalls = new Map<string, number>();
    // About 0.8 KiB of refusal: two of them are more than the failures' quarter of an 8 KiB budget.
    const refusal = JSON.stringify({ result: 'error', msg: `Invalid subdomain ${'x'.repeat(700)}`, code: 'BAD_REQUEST' });
    upstream = http.createServer((req, res) => {
      const host = req.headers.host ?? '';
      settingsCalls.set(host, (settingsCalls.get(host) ?? 0) + 1);
      res.writeHead(404, { 'content-type': 'application/json' }).end(refusal);
    });
    await new Promise<void>((r) => upstream!.listen(0, '127.0.0.1', r));
    shim = await startShim(`http://127.0.0.1:${(upstream.address() as AddressInfo).port}`, { memory: { featureLevelsBytes: 8192 } });
    for (const host of ['first.example', 'second.example', 'first.example']) {
      const answer = await request(shim.url).post('/api/v1/users/me/presence').set('Host', host).type('form').send({ status: 'active' });
      expect([answer.status, answer.text]).toEqual([404, refusal]);
    }
    expect(Object.fromEntries(settingsCalls)).toEqual({ 'first.example': 2, 'second.example': 1 });
  });
});

describe('large answers (B7)', () => {
  it('a presence answer or user list above memory.largeAnswerBytes is E2, and the limit is logged once with what to raise', async () => {
    const upstream = new SyntheticZulip({ users: 200, changesPerSecond: 1 });
    const url = await upstream.start();
    const shim = await startShim(url, { memory: { largeAnswerBytes: 4096 } });
    try {
      for (let i = 0; i < 3; i++) {
        const r = await request(shim.url)
          .post('/api/v1/users/me/presence')
          .set('Authorization', upstream.auth(0))
          .type('form')
          .send({ status: 'active', last_update_id: '-1' });
        expect(r.status).toBe(502);
        expect(r.body).toMatchObject({ result: 'error', code: 'UPSTREAM_BAD_RESPONSE' });
      }
      const said = shim.logs.filter((l) => l.includes('memory.largeAnswerBytes'));
      expect(said).toHaveLength(1);
      expect(said[0]).toMatch(/raise memory.largeAnswerBytes/);
    } finally {
      await shim.close();
      await upstream.stop();
    }
  });
});

describe('answer caches (X2)', () => {
  it('answer bodies of any number of snapshots share one byte budget; the ones used longest ago go', () => {
    const hub = new SnapshotHub(5_000, 100, Date.now, 1 << 30, 100_000);
    const caches = Array.from({ length: 10 }, () => hub.bodies());
    // history_limit_days=1, 2, 3, … each builds its own full answer: the budget holds.
    for (const [i, c] of caches.entries()) {
      for (let days = 0; days < 10; days++) c.set(`full|${days}`, { raw: Buffer.alloc(2_000 + i) });
    }
    const kept = caches.reduce((n, c) => n + c.size, 0);
    expect(kept).toBeLessThanOrEqual(Math.floor(100_000 / (64 + 1.5 * 2_000)));
    expect(kept).toBeGreaterThan(0);
    expect(caches[9]!.get('full|9')?.raw.length).toBe(2_009);
    expect(caches[0]!.get('full|0')).toBeUndefined();
    // Too large for the whole budget: not kept.
    caches[0]!.set('big', { raw: Buffer.alloc(200_000) });
    expect(caches[0]!.has('big')).toBe(false);
  });
});

describe('user list refresh (B7)', () => {
  it('an expired list is answered at once while it is read again in the background, not inside the caller', async () => {
    let calls = 0;
    let release: (() => void) | undefined;
    const members = JSON.stringify({ result: 'success', msg: '', members: [{ user_id: 7, email: 'a@x' }] });
    const server = http.createServer((req, res) => {
      if (!req.url?.startsWith('/api/v1/users')) return res.writeHead(404).end();
      calls++;
      const answer = () => res.writeHead(200, { 'content-type': 'application/json' }).end(members);
      if (calls === 1) answer();
      else release = answer;
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const client = new UpstreamClient({ target: url, timeoutMs: 5000, maxSockets: 4, insecureTls: false, maxResponseBytes: 1 << 20 });
    const users = new UserDirectory(client, createLogger('silent'), createMetrics(), {
      ttlMs: 1,
      maxEntries: 10,
      minRefreshMs: USER_LIST_MIN_REFRESH_MS,
      parser: defaultParsePool(),
      ...DIRECTORY_BUDGETS,
    });
    const realm = { upstream: url, host: 'r.example', key: `${url}|r.example` };
    try {
      const first = await users.get(realm, { authorization: 'Basic eDp5' });
      await new Promise((r) => setTimeout(r, 10)); // past ttlMs
      const again = await users.get(realm, { authorization: 'Basic eDp5' });
      expect(again).toBe(first);
      expect(again.idOf('a@x')).toBe(7);
      await expect.poll(() => calls).toBe(2); // the reload went out, and nobody waited for it
      release?.();
    } finally {
      await client.destroy();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
