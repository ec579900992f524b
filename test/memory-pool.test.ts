import fc from 'fast-check';
import request from 'supertest';
import { Pool } from 'undici';
import { describe, expect, it } from 'vitest';
import { budgetedLru } from '../src/cache/budgeted.js';
import { ByteBudget } from '../src/cache/byte-budget.js';
import { MemoryPool } from '../src/cache/memory-pool.js';
import { SyntheticZulip, visitRealm } from '../bench/synthetic-upstream.js';
import { startShim } from './support/shim.js';

/**
 * X2: one cap over every byte budget (memory.totalBytes). Each budget still bounds its own
 * kind; the pool bounds their sum, and lets go where a budget is fullest for its size.
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
    // The newest of each are kept, the oldest let go.
    expect(a.has('a19') && b.has('b19')).toBe(true);
    expect(a.has('a0') || b.has('b0')).toBe(false);
  });

  it('shrinks every budget in proportion to its size', () => {
    const pool = new MemoryPool(2_000);
    const small = sized(1_000, pool);
    const large = sized(3_000, pool);
    for (let i = 0; i < 100; i++) {
      small.set(`s${i}`, 50);
      large.set(`l${i}`, 50);
    }
    // Without the pool: 1,000 and 3,000. Within it: 2,000 split as 1 to 3, within one entry.
    expect(small.calculatedSize + large.calculatedSize).toBeLessThanOrEqual(2_000);
    expect(Math.abs(small.calculatedSize / 1_000 - large.calculatedSize / 3_000)).toBeLessThanOrEqual(50 / 1_000);
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
    // The next entry anywhere lets it go, as the least recently used of the fullest budget.
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
    expect(bodies.size).toBe(8);
    for (let i = 0; i < 8; i++) lists.set(`realm${i}`, 1_000);
    expect(answers.usedBytes + lists.calculatedSize).toBeLessThanOrEqual(10_000);
    expect(bodies.size).toBeLessThan(8);
    // What the budget let go is gone from the map too, oldest first.
    expect(bodies.has('full|0')).toBe(false);
    expect(bodies.get('full|7')?.length).toBe(1_000);
    expect(answers.usedBytes).toBe(bodies.size * 1_000);
  });

  it('under any sets and reads: each budget within its bound, the pool within its cap but for the last entry kept, each entry kept when set', () => {
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
          // The last entry kept may alone be over the cap until the next one is kept.
          let lastKept = 0;
          for (const { member, key, bytes, read } of ops) {
            const cache = caches[member]!;
            if (read) {
              cache.get(`k${key}`);
              continue;
            }
            cache.set(`k${key}`, bytes);
            for (const [i, c] of caches.entries()) expect(c.calculatedSize).toBeLessThanOrEqual(budgets[i]!);
            if (bytes > budgets[member]!) {
              expect(cache.has(`k${key}`)).toBe(false);
            } else {
              expect(cache.peek(`k${key}`)).toBe(bytes);
              lastKept = bytes;
            }
            expect(pool.usedBytes()).toBeLessThanOrEqual(Math.max(cap, lastKept));
          }
        },
      ),
      { numRuns: 300 },
    );
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
    } finally {
      await pool.close();
      await shim.close();
      await upstream.stop();
    }
  });
});
