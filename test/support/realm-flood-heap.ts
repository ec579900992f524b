import { Pool } from 'undici';
import { SyntheticZulip, visitRealm } from '../../bench/synthetic-upstream.js';
import { configSchema, loadConfig, memoryBound } from '../../src/config/index.js';
import { createLogger } from '../../src/observability/logger.js';
import { createShim } from '../../src/server.js';
import { SMALL_BUDGETS } from './small-budgets.js';

/**
 * X2 for a server with a realm per `Host`, in a process of its own (run with --expose-gc): a
 * shim with small budgets takes on `realms` realms of `users` users each, as fast as they come
 * (every one inside the snapshots' window), one full presence poll and one `GET /users/me` a
 * realm. Prints one JSON line: the heap's growth after full collections (buffers included) and
 * the budgets' sum. Every per-realm structure is held by a budget or by what a budget holds, so
 * the growth stays near the budgets whatever the flood's speed. Used by
 * test/memory-flood.test.ts.
 *
 * argv: users realms
 */

const [users = '2000', realms = '150'] = process.argv.slice(2);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');

const upstream = new SyntheticZulip({ flavour: '2.1', users: Number(users), churnPerMinute: 0, realmPerHost: true });
const url = await upstream.start();
const base = loadConfig(['--upstream', url, '--port', '0', '--log-level', 'error', '--access-log', 'off'], {}).config;
const config = configSchema.parse({
  ...base,
  memory: { ...base.memory, ...SMALL_BUDGETS },
  presence: { ...base.presence, newRealmsPerMinute: 1_000_000, newRealmsPerAddressPerMinute: 1_000_000 },
});
const budgetBytes = memoryBound(config.memory);
const shim = createShim({ config, log: createLogger('error'), target: url, upstreamId: url });
const { url: shimUrl } = await shim.listen(0, '127.0.0.1');
const pool = new Pool(shimUrl, { connections: 8 });

function heap(): number {
  gc!();
  gc!();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

async function flood(from: number, to: number): Promise<number> {
  let next = from;
  let failed = 0;
  const worker = async () => {
    while (next < to) {
      const i = next++;
      if ((await visitRealm(pool, i, i % Number(users))).some((r) => r.status !== 200)) failed++;
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  return failed;
}

// A few realms first, so code, pools and the parse worker are warm before the baseline.
await flood(0, 10);
const before = heap();
const t0 = performance.now();
const failed = await flood(10, 10 + Number(realms));
const seconds = (performance.now() - t0) / 1000;
const heapGrowth = heap() - before;
await pool.close();
await shim.close();
await upstream.stop();
process.stdout.write(
  `${JSON.stringify({ users: Number(users), realms: Number(realms), failed, budgetBytes, heapGrowth, seconds })}\n`,
  () => process.exit(0),
);
