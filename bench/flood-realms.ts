import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { shippedCli, spawnChild, startCli } from './children.js';
import { visitRealm } from './synthetic-upstream.js';

/**
 * X2/X12's big flood: `npm run bench -- flood-realms [--hosts 2000] [--users 5000] [--concurrency 8] [--total-mib N] [--coalesce-ms 5000]`.
 * The shipped CLI with the default memory budgets in front of a synthetic 2.1 server with a
 * realm per `Host` (a realm per subdomain): each of `hosts` distinct Host values is a realm of
 * `users` users, and gets one modern presence poll (full data) and one `GET /users/me` from one
 * of its users. New realms are taken on as fast as they come (`presence.newRealmsPerMinute`
 * raised: the memory is the figure here, not the admission rate). Prints the shim's resident
 * memory along the way and its high-water mark (VmHWM, the kernel's true peak).
 */

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== 'flood-realms'),
  options: {
    hosts: { type: 'string' },
    users: { type: 'string' },
    concurrency: { type: 'string' },
    'node-arg': { type: 'string', multiple: true },
    'memory-limit-mib': { type: 'string' },
    'total-mib': { type: 'string' },
    'coalesce-ms': { type: 'string' },
  },
  strict: true,
});
const hosts = Number(values.hosts ?? 2000);
const users = Number(values.users ?? 5000);
const concurrency = Number(values.concurrency ?? 8);

const dir = mkdtempSync(join(tmpdir(), 'flood-realms-'));
const configFile = join(dir, 'config.json');
writeFileSync(
  configFile,
  JSON.stringify({
    presence: { newRealmsPerMinute: 1_000_000, newRealmsPerAddressPerMinute: 1_000_000 },
    ...(values['total-mib'] && { memory: { totalBytes: Number(values['total-mib']) * 2 ** 20 } }),
  }),
);
const upstream = await spawnChild('upstream-process.ts', ['2.1', String(users), '0', '60000', 'realm-per-host']);
const shim = await startCli(shippedCli(), upstream.url, {
  dir,
  nodeArgs: values['node-arg'] ?? [],
  // A snapshot is kept two coalescing windows: a longer window stands in for a faster machine
  // (more realms inside it), as the flood's speed decides how many snapshots are alive at once.
  args: ['--config', configFile, '--access-log', 'off', ...(values['coalesce-ms'] ? ['--coalesce-ms', values['coalesce-ms']] : [])],
});
const status = (field: 'VmRSS' | 'VmHWM') =>
  Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${shim.pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;

const pool = new Pool(shim.url, { connections: concurrency });
const idleRss = status('VmRSS');
let next = 0;
let done = 0;
let errors = 0;
const statuses = new Map<string, number>();
const samples: Array<{ realms: number; rss: number }> = [];
let peakAt = { realms: 0, rss: 0 };
const sampler = setInterval(() => {
  const rss = status('VmRSS');
  if (rss > peakAt.rss) peakAt = { realms: done, rss };
}, 100);
const started = performance.now();
async function visit(i: number): Promise<void> {
  for (const r of await visitRealm(pool, i, i % users)) {
    if (r.status === 200) continue;
    errors++;
    if (r.status === undefined) continue;
    const key = `${r.method} ${r.path} → ${r.status}`;
    statuses.set(key, (statuses.get(key) ?? 0) + 1);
  }
}
await Promise.all(
  Array.from({ length: concurrency }, async () => {
    while (next < hosts) {
      await visit(next++);
      if (++done % Math.max(1, Math.floor(hosts / 10)) === 0) samples.push({ realms: done, rss: Math.round(status('VmRSS')) });
    }
  }),
);
clearInterval(sampler);
const seconds = (performance.now() - started) / 1000;
// The shim's own view at the end (its /metrics): V8's heap, and memory outside it (Buffers, typed arrays).
const metrics = await (await pool.request({ method: 'GET', path: '/metrics', headers: { host: 'bench.test' } })).body.text();
const gauge = (name: string) => Number(new RegExp(`^\\w*${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(metrics)?.[1] ?? Number.NaN) / 2 ** 20;
/** What each memory budget charges at the end, and the cap over them. */
function budgetsLine(): string {
  const charged = [...metrics.matchAll(/^\w*memory_budgets_bytes\{budget="(\w+)"\} (\S+)$/gm)].map(([, budget, bytes]) => ({
    budget,
    mib: Number(bytes) / 2 ** 20,
  }));
  const total = charged.reduce((sum, c) => sum + c.mib, 0);
  return `${total.toFixed(0)} of ${gauge('memory_budgets_max_bytes').toFixed(0)} MiB (${charged.map((c) => `${c.budget} ${c.mib.toFixed(1)}`).join(', ')})`;
}
const heapLine = `heap used ${gauge('nodejs_heap_size_used_bytes').toFixed(0)} of ${gauge('nodejs_heap_size_total_bytes').toFixed(0)} MiB, external ${gauge('nodejs_external_memory_bytes').toFixed(0)} MiB, budgets charged ${budgetsLine()}`;
const hwm = status('VmHWM');
const end = status('VmRSS');
await pool.close();
await shim.stop();
await upstream.stop();
rmSync(dir, { recursive: true, force: true });
process.stdout.write(
  `flood-realms: ${hosts} realms (a realm per Host) of ${users} users, default budgets, ${concurrency} at a time (${seconds.toFixed(0)} s, ${errors} errors)\n` +
    `RSS MiB before ${idleRss.toFixed(0)}; by tenth: ${samples.map((s) => s.rss).join(', ')}; at the end ${end.toFixed(0)}\n` +
    `peak RSS (VmHWM) ${hwm.toFixed(0)} MiB; highest sampled ${peakAt.rss.toFixed(0)} MiB after ${peakAt.realms} realms; at the end ${heapLine}\n` +
    (statuses.size ? `not 200: ${[...statuses].map(([k, n]) => `${k} ×${n}`).join(', ')}\n` : ''),
);
