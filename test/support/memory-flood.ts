import { Writable } from 'node:stream';
import { Pool } from 'undici';
import { configSchema, loadConfig, memoryBound } from '../../src/config/index.js';
import { createLogger } from '../../src/observability/logger.js';
import { createShim } from '../../src/server.js';
import { SMALL_BUDGETS } from './small-budgets.js';
import { SyntheticZulip } from './synthetic-zulip.js';

/**
 * X2 in a process of its own (run with --expose-gc): a shim in front of a synthetic realm gets
 * polls and own-profile requests from `hosts` distinct Host values, each with its own
 * credentials; the heap is measured after full collections before and after. Prints one JSON
 * line. Used by test/memory-flood.test.ts (small budgets, quick) and the bench (defaults).
 *
 * argv: users hosts budgets(small|default|unbounded) [concurrency]
 */

const [users = '500', hosts = '1500', budgets = 'small', concurrency = '8'] = process.argv.slice(2);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');

const upstream = new SyntheticZulip({ users: Number(users), changesPerSecond: 20 });
const url = await upstream.start();
const base = loadConfig(['--upstream', url, '--port', '0', '--log-level', 'warn'], {}).config;
// "unbounded": budgets far above what the flood needs, to show what they hold back.
const UNBOUNDED = { ...Object.fromEntries(Object.keys(SMALL_BUDGETS).map((k) => [k, 2 ** 40])), totalBytes: 2 ** 40 };
const chosen = budgets === 'small' ? SMALL_BUDGETS : budgets === 'unbounded' ? UNBOUNDED : {};
const config = configSchema.parse({ ...base, memory: { ...base.memory, ...chosen }, presence: { ...base.presence, maxRealms: 100_000 } });
// What the budgets may hold together (memoryBound: the cap over them, featureLevels beside it).
const budgetBytes = memoryBound(config.memory);
const warnings: string[] = [];
const sink = new Writable({
  write(chunk, _enc, cb) {
    warnings.push(String(chunk));
    cb();
  },
});
const shim = createShim({ config, log: createLogger('warn', sink), target: url, upstreamId: url });
const { url: shimUrl } = await shim.listen(0, '127.0.0.1');
const pool = new Pool(shimUrl, { connections: Number(concurrency) });

function measure() {
  gc!();
  gc!();
  const m = process.memoryUsage();
  return { heap: m.heapUsed + m.arrayBuffers, rss: m.rss };
}

async function visit(i: number): Promise<void> {
  const headers = { host: `realm-${i}.flood.example`, authorization: upstream.auth(i % upstream.n) };
  const poll = await pool.request({
    method: 'POST',
    path: '/api/v1/users/me/presence',
    headers: { ...headers, 'content-type': 'application/x-www-form-urlencoded' },
    body: 'status=active&last_update_id=-1',
  });
  await poll.body.dump();
  const me = await pool.request({ method: 'GET', path: '/api/v1/users/me', headers });
  await me.body.dump();
  if (poll.statusCode !== 200 || me.statusCode !== 200) throw new Error(`HTTP ${poll.statusCode}/${me.statusCode} for host ${i}`);
}

async function flood(from: number, to: number): Promise<void> {
  let next = from;
  const worker = async () => {
    while (next < to) await visit(next++);
  };
  await Promise.all(Array.from({ length: Number(concurrency) }, worker));
}

// A few realms first, so code, pools and workers are warm before the baseline.
await flood(0, 20);
const before = measure();
const t0 = performance.now();
await flood(20, 20 + Number(hosts));
const seconds = (performance.now() - t0) / 1000;
const after = measure();
await pool.close();
await shim.close();
await upstream.stop();
process.stdout.write(
  `${JSON.stringify({
    users: Number(users),
    hosts: Number(hosts),
    budgets,
    budgetBytes,
    heapBefore: before.heap,
    heapAfter: after.heap,
    heapGrowth: after.heap - before.heap,
    rssBefore: before.rss,
    rssAfter: after.rss,
    seconds,
    warnings: warnings.length,
  })}\n`,
  () => process.exit(0),
);
