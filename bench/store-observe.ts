import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { createLogger } from '../src/observability/logger.js';
import type { ModernPresence, Observation } from '../src/presence/ledger.js';
import { encodeLedger } from '../src/store/codec.js';
import { MemoryStore } from '../src/store/memory.js';
import { RedisStore } from '../src/store/redis.js';
import type { PresenceStore } from '../src/presence/ledger-store.js';
import { loadConfig } from '../src/config/index.js';

/** The default budgets, as the shim runs with them. */
const defaults = loadConfig([], {}, { needsUpstream: false }).config;

/**
 * What the Redis store adds to one `observe` (S1): the same realm of N users (default 10,000),
 * one snapshot a minute with 2 % of the users changed, merged through the in-memory store,
 * through one Redis replica (its decoded copy is current: one compare-and-set), and through two
 * replicas taking turns (each write follows the other's: read, decode, merge, encode, write).
 * Also the Redis memory of the realm's key. Prints one JSON line.
 *
 *   node --import tsx bench/store-observe.ts [users] [rounds]      (REDIS_URL, default local)
 */

const users = Number(process.argv[2] ?? 10_000);
const rounds = Number(process.argv[3] ?? 200);
const url = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const prefix = `zcs-bench:${randomBytes(6).toString('hex')}:`;
const log = createLogger('silent');
const now = Math.floor(Date.now() / 1000);

function observation(round: number): Observation {
  const presences = new Map<number, ModernPresence>();
  const changedFrom = ((round * users) / 50) % users;
  for (let i = 0; i < users; i++) {
    const changed = round > 0 && i >= changedFrom && i < changedFrom + users / 50;
    const idle = now - ((i * 7919) % (13 * 86_400)) + (changed ? round * 60 : 0);
    presences.set(10 + i, { active_timestamp: idle - (i % 3) * 60, idle_timestamp: idle });
  }
  return { serverTimestamp: now + round * 60 + 0.25, presences, complete: true };
}

const observations = Array.from({ length: rounds + 20 }, (_, i) => observation(i));

interface Scenario {
  name: string;
  stores: PresenceStore[];
  times: number[];
}

/** The scenarios take turns observation by observation, so that they share whatever else the machine is doing. */
async function run(scenarios: Scenario[]): Promise<Array<{ name: string; medianMs: number; p90Ms: number }>> {
  for (let i = 0; i < observations.length; i++) {
    for (const sc of scenarios) {
      const store = sc.stores[i % sc.stores.length]!;
      const t = performance.now();
      await store.merge(`bench|${sc.name}`, observations[i]!);
      if (i >= 20) sc.times.push(performance.now() - t); // the first 20 warm up the JIT and the caches
    }
  }
  return scenarios.map(({ name, times }) => {
    times.sort((a, b) => a - b);
    const at = (q: number) => Number(times[Math.floor(q * (times.length - 1))]!.toFixed(2));
    return { name, medianMs: at(0.5), p90Ms: at(0.9) };
  });
}

const admin = new Redis(url);
const one = new RedisStore({ url, keyPrefix: prefix, log, maxRealms: defaults.presence.maxRealms, maxBytes: defaults.memory.ledgersBytes });
const other = new RedisStore({
  url,
  keyPrefix: prefix,
  log,
  maxRealms: defaults.presence.maxRealms,
  maxBytes: defaults.memory.ledgersBytes,
});
try {
  await Promise.all([one.ping(), other.ping()]); // connected before the clock starts
  const [memory, redis, turns] = await run([
    { name: 'memory', stores: [new MemoryStore({ maxRealms: 10, maxBytes: defaults.memory.ledgersBytes })], times: [] },
    { name: 'redis-one-replica', stores: [one], times: [] },
    { name: 'redis-two-replicas-alternating', stores: [one, other], times: [] },
  ]);
  const key = one.key('bench|redis-one-replica');
  const memoryUsage = Number(await admin.call('MEMORY', 'USAGE', key));
  const state = await one.load('bench|redis-one-replica');
  console.log(
    JSON.stringify({
      users,
      rounds,
      observe: [memory, redis, turns],
      addedMedianMs: {
        oneReplica: +(redis!.medianMs - memory!.medianMs).toFixed(2),
        alternating: +(turns!.medianMs - memory!.medianMs).toFixed(2),
      },
      valueBytes: state ? encodeLedger(state).length + 8 : undefined,
      redisMemoryUsageBytes: memoryUsage,
    }),
  );
} finally {
  await Promise.all([one.close(), other.close()]);
  const keys = await admin.keys(`${prefix}*`);
  if (keys.length) await admin.unlink(...keys);
  admin.disconnect();
}
