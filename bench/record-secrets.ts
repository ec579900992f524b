import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { shippedCli, spawnChild, startCli } from './children.js';
import { send, type Req } from './load.js';
import { emailOf, PRESENCE_PATH, SMALL_PATH } from './synthetic-upstream.js';

/**
 * X2/X8's recording figure: `npm run bench -- record-secrets [--requests 10000] [--users 3000] [--keep] [--full-answers] [--no-record]`.
 * A recording shim in front of a synthetic 2.1 realm gets `requests` requests, 4 at a time,
 * each with credentials of its own (a client spraying secrets): presence polls and passed-through
 * GETs in turn. Prints the request rate of each tenth of the run (the first and the last
 * compared: the redactor must not slow down as secrets accumulate), the shim's RSS along the
 * way (the shipped CLI, in a process of its own), and the HAR's size.
 */

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== 'record-secrets'),
  options: {
    requests: { type: 'string' },
    users: { type: 'string' },
    concurrency: { type: 'string' },
    keep: { type: 'boolean' },
    'full-answers': { type: 'boolean' },
    'no-record': { type: 'boolean' },
    'node-arg': { type: 'string', multiple: true },
  },
  strict: true,
});
const total = Number(values.requests ?? 10_000);
const users = Number(values.users ?? 3000);
const concurrency = Number(values.concurrency ?? 4);

const dir = mkdtempSync(join(tmpdir(), 'record-secrets-'));
const har = join(dir, 'run.har');
const upstream = await spawnChild('upstream-process.ts', ['2.1', String(users), '0.02', '60000']);
// The shipped CLI: recording is set up there (a recorder standing in for the upstream).
const shim = await startCli(shippedCli(), upstream.url, {
  dir,
  nodeArgs: values['node-arg'] ?? [],
  args: [
    // --no-record: the same traffic unrecorded, the reference for what recording costs.
    ...(values['no-record'] ? [] : ['--record', har]),
    '--access-log',
    'off',
    // --full-answers: no sharing (P9), so every presence poll records the realm's full answer.
    ...(values['full-answers'] ? ['--coalesce-ms', '0'] : []),
  ],
});
const pool = new Pool(shim.url, { connections: concurrency, pipelining: 1 });
/** The shim process's resident memory (Linux: /proc). */
const statusMiB = (field: 'VmRSS' | 'VmHWM') =>
  Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${shim.pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
const rssMiB = async () => statusMiB('VmRSS').toFixed(0);

const slices: { rps: number; rss: string }[] = [];
const slice = Math.max(1, Math.floor(total / 10));
let next = 0;
let errors = 0;
const statuses = new Map<string, number>();
let rssPeak = 0;
const started = performance.now();
let sliceStart = started;
await Promise.all(
  Array.from({ length: concurrency }, async () => {
    while (next < total) {
      const i = next++;
      // A secret never seen before: the redactor has one more to find and replace.
      const auth = `Basic ${Buffer.from(`${emailOf(i % users)}:sprayed-${i}-${Math.random().toString(36).slice(2)}`).toString('base64')}`;
      const r: Req =
        i % 2 === 0
          ? {
              method: 'POST',
              path: PRESENCE_PATH,
              headers: { authorization: auth, host: 'bench.test', 'content-type': 'application/x-www-form-urlencoded' },
              body: 'status=active&last_update_id=-1',
            }
          : { method: 'GET', path: SMALL_PATH, headers: { authorization: auth, host: 'bench.test' } };
      try {
        const s = await send(pool, r);
        if (s.status !== 200) {
          errors++;
          const key = `${r.method} ${r.path} → ${s.status}`;
          statuses.set(key, (statuses.get(key) ?? 0) + 1);
        }
      } catch {
        errors++;
      }
      if ((i + 1) % slice === 0) {
        const now = performance.now();
        const rss = await rssMiB();
        rssPeak = Math.max(rssPeak, Number(rss));
        slices.push({ rps: slice / ((now - sliceStart) / 1000), rss });
        sliceStart = now;
      }
    }
  }),
);
const seconds = (performance.now() - started) / 1000;
// The kernel's high-water mark: the true peak, also between the samples above.
const hwmMiB = statusMiB('VmHWM');
await pool.close();
await shim.stop(); // the HAR is complete once the shim has stopped (SIGTERM: drained, written)
const harMiB = values['no-record'] ? '0' : (statSync(har).size / 2 ** 20).toFixed(1);
await upstream.stop();
// --keep: the HAR is left for a look (its path printed).
if (values.keep) process.stdout.write(`HAR kept: ${har}\n`);
else rmSync(dir, { recursive: true, force: true });

const first = slices[0]!;
const last = slices.at(-1)!;
process.stdout.write(
  `record-secrets: ${total} requests, each with its own credentials, ${concurrency} at a time, against a ${users}-user 2.1 realm, recorded (${seconds.toFixed(0)} s, ${errors} errors, HAR ${harMiB} MiB)\n` +
    `req/s by tenth: ${slices.map((s) => s.rps.toFixed(0)).join(', ')}\n` +
    `RSS MiB by tenth: ${slices.map((s) => s.rss).join(', ')} (peak sampled ${rssPeak}; high-water mark ${hwmMiB.toFixed(0)})\n` +
    (statuses.size ? `not 200: ${[...statuses].map(([k, n]) => `${k} ×${n}`).join(', ')}\n` : '') +
    `last tenth / first tenth: ${(last.rps / first.rps).toFixed(2)}× (target: no slower as secrets accumulate)\n`,
);
