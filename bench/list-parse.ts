import { availableParallelism, loadavg } from 'node:os';
import { Worker } from 'node:worker_threads';
import { parseWithListInSteps } from '../src/profile/user-objects.js';
import { legacyUserRow } from './legacy-user-row.js';

/**
 * Whether profile/user-objects.ts's parse in steps earns its keep (V4: no long block while a
 * large user list is read whole, as GET /users and register must, to fill every object).
 * The same 2.1 `GET /users` answer of N users read three ways, on this thread:
 * - JSON.parse of the whole text;
 * - parseWithListInSteps (the list located by a scan, its items parsed 500 at a time);
 * - JSON.parse in a worker thread, the object posted back (the parse pool's way, but for whole
 *   objects: this thread then decodes the posted object graph).
 * For each, the time to the object and the longest gap of a 1 ms timer meanwhile (the block
 * other requests would see); medians of 9 runs after 2 warm-ups. Prints one line per way.
 *
 *   node --import tsx bench/list-parse.ts [users…]       (default 10000 100000)
 */

const sizes = process.argv.slice(2).map(Number);

/** How long `work` takes, and the longest gap of a 1 ms timer while it runs. */
async function timed(work: () => Promise<unknown>): Promise<{ ms: number; blockMs: number }> {
  let last = performance.now();
  let longest = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 1);
  await new Promise((r) => setTimeout(r, 5));
  [last, longest] = [performance.now(), 0];
  const started = performance.now();
  await work();
  const ms = performance.now() - started;
  await new Promise((r) => setTimeout(r, 3)); // the timer's tick after the work's last block
  clearInterval(timer);
  return { ms, blockMs: longest };
}

const worker = new Worker(
  `const { parentPort } = require('node:worker_threads');
   parentPort.on('message', (b) => parentPort.postMessage(JSON.parse(Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('utf8'))));`,
  { eval: true },
);
const inWorker = (body: Buffer) =>
  new Promise<unknown>((resolve) => {
    worker.once('message', resolve);
    const moved = Uint8Array.prototype.slice.call(body) as Uint8Array;
    worker.postMessage(moved, [moved.buffer as ArrayBuffer]);
  });

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const whole = (b: Buffer) => JSON.parse(b.toString('utf8')) as Record<string, unknown>;

console.log(`Node ${process.version}, ${availableParallelism()} cores, load average ${loadavg()[0]!.toFixed(2)}`);
for (const users of sizes.length ? sizes : [10_000, 100_000]) {
  const body = Buffer.from(
    JSON.stringify({ result: 'success', msg: '', members: Array.from({ length: users }, (_, i) => legacyUserRow(i + 1)) }),
  );
  const ways: Array<[string, () => Promise<unknown>]> = [
    ['JSON.parse', async () => whole(body)],
    ['parseWithListInSteps', () => parseWithListInSteps(body, 'members', whole)],
    ['worker JSON.parse, object posted back', () => inWorker(body)],
  ];
  for (const [name, work] of ways) {
    for (let i = 0; i < 2; i++) await work();
    const runs: Array<{ ms: number; blockMs: number }> = [];
    for (let i = 0; i < 9; i++) runs.push(await timed(work));
    console.log(
      `${users} users (${(body.length / 1e6).toFixed(1)} MB), ${name}: ${median(runs.map((r) => r.ms)).toFixed(1)} ms, ` +
        `longest block ${median(runs.map((r) => r.blockMs)).toFixed(1)} ms`,
    );
  }
}
await worker.terminate();
