import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import v8 from 'node:v8';
import { Pool } from 'undici';
import { configSchema, loadConfig } from '../src/config/index.js';
import { createLogger } from '../src/observability/logger.js';
import { createShim } from '../src/server.js';
import { SyntheticZulip, visitRealm } from './synthetic-upstream.js';

/**
 * Where a flood of realms' memory goes: `node --expose-gc --import tsx bench/flood-heap.ts
 * [--hosts 100] [--users 5000]`. The shim in this process (default budgets) in front of a
 * synthetic 2.1 server with a realm per Host; after the flood, full collections, then V8's
 * heap spaces, the process's memory and a heap snapshot summed by object kind (self sizes) are
 * printed: the largest kinds first, with their counts.
 */

const { values } = parseArgs({
  options: { hosts: { type: 'string' }, users: { type: 'string' }, top: { type: 'string' } },
  strict: true,
});
const hosts = Number(values.hosts ?? 100);
const users = Number(values.users ?? 5000);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');

const upstream = new SyntheticZulip({ flavour: '2.1', users, churnPerMinute: 0, realmPerHost: true });
const url = await upstream.start();
const base = loadConfig(['--upstream', url, '--port', '0', '--log-level', 'error', '--access-log', 'off'], {}).config;
const config = configSchema.parse({
  ...base,
  presence: { ...base.presence, newRealmsPerMinute: 1_000_000, newRealmsPerAddressPerMinute: 1_000_000 },
});
const shim = createShim({ config, log: createLogger('error'), target: url, upstreamId: url });
const { url: shimUrl } = await shim.listen(0, '127.0.0.1');
const pool = new Pool(shimUrl, { connections: 8 });

const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
function memory(label: string): void {
  gc!();
  gc!();
  const m = process.memoryUsage();
  process.stdout.write(
    `${label}: rss ${mib(m.rss)}, heapUsed ${mib(m.heapUsed)}, external ${mib(m.external)}, arrayBuffers ${mib(m.arrayBuffers)}\n`,
  );
}
memory('before');
let next = 0;
await Promise.all(
  Array.from({ length: 8 }, async () => {
    while (next < hosts) {
      const i = next++;
      await visitRealm(pool, i, i % users);
    }
  }),
);
memory(`after ${hosts} realms`);
for (const s of v8.getHeapSpaceStatistics())
  if (s.space_used_size > 1 << 20) process.stdout.write(`  ${s.space_name}: ${mib(s.space_used_size)}\n`);

const file = join(tmpdir(), `flood-heap-${process.pid}.heapsnapshot`);
v8.writeHeapSnapshot(file);
const snap = JSON.parse(readFileSync(file, 'utf8')) as {
  snapshot: { meta: { node_fields: string[]; node_types: [string[]] } };
  nodes: number[];
  strings: string[];
};
if (process.env.KEEP_SNAPSHOT) process.stdout.write(`snapshot: ${file}\n`);
else rmSync(file);
const fields = snap.snapshot.meta.node_fields;
const width = fields.length;
const [typeAt, nameAt, sizeAt] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f)) as [number, number, number];
const types = snap.snapshot.meta.node_types[0];
const byKind = new Map<string, { bytes: number; count: number }>();
for (let i = 0; i < snap.nodes.length; i += width) {
  const type = types[snap.nodes[i + typeAt]!]!;
  const name = snap.strings[snap.nodes[i + nameAt]!]!;
  const kind = type === 'object' || type === 'native' ? `${type} ${name}` : type;
  const k = byKind.get(kind) ?? { bytes: 0, count: 0 };
  k.bytes += snap.nodes[i + sizeAt]!;
  k.count++;
  byKind.set(kind, k);
}
const top = [...byKind].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, Number(values.top ?? 25));
for (const [kind, k] of top) process.stdout.write(`  ${mib(k.bytes).padStart(10)}  ${String(k.count).padStart(9)}  ${kind}\n`);
await pool.close();
await shim.close();
await upstream.stop();
process.exit(0);
