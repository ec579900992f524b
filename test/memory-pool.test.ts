import fc from 'fast-check';
import request from 'supertest';
import { Pool } from 'undici';
import { describe, expect, it } from 'vitest';
import { budgetedLru } from '../src/cache/budgeted.js';
import { ByteBudget } from '../src/cache/byte-budget.js';
import { MemoryPool } from '../src/cache/memory-pool.js';
import { SyntheticZulip, visitRealm } from '../bench/synthetic-upstream.js';
import { memoryBound, memoryCap } from '../src/config/index.js';
import { BUDGETS } from './support/budgets.js';
import { startShim } from './support/shim.js';

/**
 * X2: one cap over every byte budget (memory.totalBytes). Each budget still bounds its own
 * kind; the pool bounds their sum, and past it the entry used longest ago goes, whichever
 * budget holds it.
 */

/** A budgeted cache of entries whose value is their size in bytes. */
const sized = (maxBytes: number, pool: MemoryPool) =>
  budgetedLru<string, number>(maxBytes, (bytes) => ({ fixed: bytes }), { pool: pool.in('snapshots') });

describe('MemoryPool', () => {
  it('holds the budgets together under the cap, each budget still under its own', () => {
    const pool = new MemoryPool(1_000);
    const a = sized(800, pool);
    const b = sized(800, pool);
    for (let i = 0; i < 20; i++) {
      a.set(`a${i}`, 100);
      b.set(`b${i}`, 100);
    }
    expect(a.calculatedSize + b.calculatedSize).toBe(1_000);
    expect(pool.usedBytes()).toBe(1_000);
    expect([...a.keys(), ...b.keys()].sort()).toEqual(['a15', 'a16', 'a17', 'a18', 'a19', 'b15', 'b16', 'b17', 'b18', 'b19']);
  });

  it('lets go of the entry used longest ago, whichever budget holds it: a big entry in use stays', () => {
    const pool = new MemoryPool(2_000);
    const lists = sized(2_000, pool);
    const snapshots = sized(2_000, pool);
    lists.set('big', 1_200);
    for (let i = 0; i < 20; i++) {
      snapshots.set(`s${i}`, 100);
      // The big realm is in use: read between every new entry elsewhere.
      expect(lists.get('big')).toBe(1_200);
    }
    expect(lists.has('big')).toBe(true);
    expect([...snapshots.keys()].sort()).toEqual(['s12', 's13', 's14', 's15', 's16', 's17', 's18', 's19']);
    // Left unused, it becomes the oldest once the eight entries before it are gone: the ninth lets it go.
    for (let i = 20; i < 28; i++) snapshots.set(`s${i}`, 100);
    expect(lists.has('big')).toBe(true);
    snapshots.set('s28', 100);
    expect(lists.has('big')).toBe(false);
  });

  it('a fetch is a use, as a get is', async () => {
    const pool = new MemoryPool(300);
    const lists = budgetedLru<string, number>(1_000, (bytes) => ({ fixed: bytes }), {
      pool: pool.in('userDirectories'),
      fetchMethod: async () => 100,
    });
    const other = sized(1_000, pool);
    await lists.fetch('a');
    other.set('x', 100);
    await lists.fetch('a');
    other.set('y', 100);
    other.set('z', 100);
    // x was used after a's first fetch but before its second: x goes, a stays.
    expect(lists.has('a')).toBe(true);
    expect([...other.keys()].sort()).toEqual(['y', 'z']);
  });

  it('keeps the entry just set, even where it alone is over the cap', () => {
    const pool = new MemoryPool(1_000);
    const a = sized(5_000, pool);
    const b = sized(5_000, pool);
    b.set('old', 400);
    a.set('big', 1_500);
    expect(a.get('big')).toBe(1_500);
    expect(b.has('old')).toBe(false);
    expect(pool.usedBytes()).toBe(1_500);
    // The next entry anywhere lets it go, as the one used longest ago.
    b.set('next', 100);
    expect(a.has('big')).toBe(false);
    expect(pool.usedBytes()).toBe(100);
  });

  it('lets go of answers kept in a ByteBudget like any other entry, and the map forgets them', () => {
    const pool = new MemoryPool(10_000);
    const answers = new ByteBudget(10_000, pool.in('answers'));
    const lists = sized(10_000, pool);
    const bodies = answers.map<string, Buffer>((b) => ({ fixed: 0, bytes: [b] }));
    for (let i = 0; i < 8; i++) bodies.set(`full|${i}`, Buffer.alloc(1_000));
    // A read is a use: full|0 is now the newest answer.
    expect(bodies.get('full|0')?.length).toBe(1_000);
    for (let i = 0; i < 8; i++) lists.set(`realm${i}`, 1_000);
    expect(answers.usedBytes + lists.calculatedSize).toBe(10_000);
    // The six answers used longest ago went, and the map forgot them.
    expect([...bodies.keys()].sort()).toEqual(['full|0', 'full|7']);
    expect(answers.usedBytes).toBe(2_000);
  });

  it('under any sets and reads, keeps what one least-recently-used order over all budgets would', () => {
    const op = fc.record({
      member: fc.nat(3),
      key: fc.nat(15),
      bytes: fc.integer({ min: 1, max: 600 }),
      read: fc.boolean(),
    });
    fc.assert(
      fc.property(
        fc.integer({ min: 100, max: 3_000 }),
        fc.array(fc.integer({ min: 100, max: 2_000 }), { minLength: 4, maxLength: 4 }),
        fc.array(op, { maxLength: 200 }),
        (cap, budgets, ops) => {
          const pool = new MemoryPool(cap);
          const caches = budgets.map((max) => sized(max, pool));
          // The model: every entry kept, least recently used first, over all budgets.
          let model: Array<{ member: number; key: string; bytes: number }> = [];
          const bytesOf = (entries: typeof model) => entries.reduce((n, e) => n + e.bytes, 0);
          for (const { member, key: k, bytes, read } of ops) {
            const key = `k${k}`;
            const at = model.findIndex((e) => e.member === member && e.key === key);
            if (read) {
              caches[member]!.get(key);
              if (at >= 0) model.push(...model.splice(at, 1));
            } else {
              caches[member]!.set(key, bytes);
              if (at >= 0) model.splice(at, 1);
              if (bytes <= budgets[member]!) {
                // Its own budget first (its oldest entries go), then the cap (the oldest anywhere, never this one).
                while (bytesOf(model.filter((e) => e.member === member)) + bytes > budgets[member]!) {
                  model.splice(
                    model.findIndex((e) => e.member === member),
                    1,
                  );
                }
                model.push({ member, key, bytes });
                while (bytesOf(model) > cap && model.length > 1) model.shift();
              }
            }
            for (const [i, c] of caches.entries()) {
              expect([...c.keys()].sort()).toEqual(
                model
                  .filter((e) => e.member === i)
                  .map((e) => e.key)
                  .sort(),
              );
            }
            expect(pool.usedBytes()).toBe(bytesOf(model));
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('memoryCap: what the budgets may charge together', () => {
  const MiB = 2 ** 20;
  it.each([
    ['the defaults: memory.totalBytes', {}, 144 * MiB],
    [
      'a cap above the sum of the budgets: the sum (212 MiB; featureLevelsBytes stays apart, largeAnswerBytes is no budget)',
      { totalBytes: 1024 * MiB },
      212 * MiB,
    ],
    [
      'small budgets under the default cap: their sum',
      { userDirectoriesBytes: MiB, snapshotsBytes: MiB, answersBytes: MiB, ledgersBytes: MiB },
      24 * MiB,
    ],
  ])('%s', (_name, memory, expected) => {
    expect(memoryCap({ ...BUDGETS, ...memory })).toBe(expected);
    // The start-up line's total: featureLevelsBytes beside the cap.
    expect(memoryBound({ ...BUDGETS, ...memory })).toBe(expected + BUDGETS.featureLevelsBytes);
  });
});

describe('memory.totalBytes in a shim', () => {
  it('a realm per Host fills the budgets only up to the cap, told on /metrics', { timeout: 30_000 }, async () => {
    const upstream = new SyntheticZulip({
      flavour: '2.1',
      users: 300,
      churnPerMinute: 0,
      minuteMs: 60_000,
      stepsPerMinute: 1,
      seed: 1,
      realmPerHost: true,
    });
    const url = await upstream.start();
    const totalBytes = 512 * 1024;
    const shim = await startShim(url, {
      memory: { totalBytes },
      presence: { newRealmsPerMinute: 1_000_000, newRealmsPerAddressPerMinute: 1_000_000 },
    });
    const pool = new Pool(shim.url, { connections: 4 });
    try {
      // Each realm: a full presence poll and GET /users/me (its list, snapshot, answer, ledger, caller).
      for (let i = 0; i < 40; i++) expect((await visitRealm(pool, i, i % 300)).map((r) => r.status)).toEqual([200, 200]);
      const metrics = (await request(shim.url).get('/metrics')).text;
      const gauge = (name: string) => Number(new RegExp(`^zulip_compat_shim_${name} (\\S+)$`, 'm').exec(metrics)?.[1]);
      const charged = new Map(
        [...metrics.matchAll(/^zulip_compat_shim_memory_budgets_bytes\{budget="(\w+)"\} (\S+)$/gm)].map((m) => [m[1]!, Number(m[2])]),
      );
      const total = [...charged.values()].reduce((a, b) => a + b, 0);
      expect(gauge('memory_budgets_max_bytes')).toBe(totalBytes);
      // Every kind took its part, and together they stayed under the cap.
      expect(charged.get('userDirectories')).toBeGreaterThan(0);
      expect(charged.get('snapshots')).toBeGreaterThan(0);
      expect(charged.get('ledgers')).toBeGreaterThan(0);
      expect(total).toBeGreaterThan(totalBytes / 2);
      expect(total).toBeLessThanOrEqual(totalBytes);

      // X12: server_settings answers (kept before any credential is checked) stay outside the cap:
      // made-up Hosts asked for them, more than the whole cap's worth, push no realm's state out.
      expect(charged.has('featureLevels')).toBe(false);
      const { featureLevels } = shim.shim.context;
      for (let i = 0; i < 2_000; i++) {
        const host = `made-up-${i}.flood.test`;
        await featureLevels.info({ upstream: url, host, key: `${url}|${host}` });
      }
      const after = (await request(shim.url).get('/metrics')).text;
      const chargedAfter = new Map(
        [...after.matchAll(/^zulip_compat_shim_memory_budgets_bytes\{budget="(\w+)"\} (\S+)$/gm)].map((m) => [m[1]!, Number(m[2])]),
      );
      for (const budget of ['userDirectories', 'ledgers'])
        expect([budget, chargedAfter.get(budget)]).toEqual([budget, charged.get(budget)]);
    } finally {
      await pool.close();
      await shim.close();
      await upstream.stop();
    }
  });
});
