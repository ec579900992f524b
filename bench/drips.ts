import net from 'node:net';
import { parseArgs } from 'node:util';
import { spawnChild } from './children.js';
import { percentile } from './load.js';
import { basicAuth, SMALL_PATH } from './synthetic-upstream.js';

/**
 * X11's drip figure: `npm run bench -- drips [--drips 300] [--addresses 1] [--seconds 20]
 * [--every-ms 5000]`. `drips` clients each start a pass-through upload of 10,000 bytes and send
 * one byte of it every `every-ms`, and open a new one as soon as theirs is answered or cut;
 * they come from `addresses` loopback addresses (127.0.0.1, 127.0.0.2, …). Meanwhile a probe
 * sends a pass-through `GET` on a new connection every 250 ms: how long does it wait for its
 * answer, first without the drips, then beside them? What do the drips get, and how long is
 * each held? The shim (defaults) and a synthetic 2.1 upstream run in child processes.
 */

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== 'drips'),
  options: {
    drips: { type: 'string' },
    addresses: { type: 'string' },
    seconds: { type: 'string' },
    'every-ms': { type: 'string' },
  },
  strict: true,
});
const drips = Number(values.drips ?? 300);
const addresses = Number(values.addresses ?? 1);
const seconds = Number(values.seconds ?? 20);
const everyMs = Number(values['every-ms'] ?? 5_000);
/** A probe not answered within this long counts as timed out. */
const PROBE_TIMEOUT_MS = 20_000;

const upstream = await spawnChild('upstream-process.ts', ['2.1', '200', '0', '60000']);
const shim = await spawnChild('shim-process.ts', [upstream.url, '5000', 'warn']);
const port = Number(new URL(shim.url).port);

/** One pass-through GET on a new connection: its status (0: no answer in time) and milliseconds to its status line. */
function probe(): Promise<{ status: number; ms: number }> {
  return new Promise((resolve) => {
    const t = performance.now();
    const s = net.connect(port, '127.0.0.1', () =>
      s.write(`GET ${SMALL_PATH} HTTP/1.1\r\nHost: bench.test\r\nAuthorization: ${basicAuth(1)}\r\nConnection: close\r\n\r\n`),
    );
    const done = (status: number) => {
      clearTimeout(timer);
      s.destroy();
      resolve({ status, ms: performance.now() - t });
    };
    const timer = setTimeout(() => done(0), PROBE_TIMEOUT_MS);
    let got = '';
    s.on('data', (d) => {
      got += String(d);
      const m = /^HTTP\/1\.1 (\d{3})/.exec(got);
      if (m) done(Number(m[1]));
    });
    s.on('error', () => done(0));
  });
}

/** Probes every 250 ms for `ms`: statuses, p50/p99/max, and how many waited 2 s or more. */
async function probes(ms: number) {
  const samples: Array<{ status: number; ms: number }> = [];
  const until = performance.now() + ms;
  const waiting: Array<Promise<void>> = [];
  while (performance.now() < until) {
    waiting.push(probe().then((p) => void samples.push(p)));
    await new Promise((r) => setTimeout(r, 250));
  }
  await Promise.all(waiting);
  const sorted = Float64Array.from(samples.map((p) => p.ms)).sort();
  const statuses = new Map<number, number>();
  for (const p of samples) statuses.set(p.status, (statuses.get(p.status) ?? 0) + 1);
  return {
    n: samples.length,
    statuses: [...statuses].map(([s, n]) => `${n} × ${s || 'no answer'}`).join(', '),
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1] ?? 0,
    slow: samples.filter((p) => p.ms >= 2_000).length,
  };
}

/** What the drips got: by first status line (or how they ended), and how long each was held. */
const outcomes = new Map<string, number>();
const heldMs: number[] = [];
let running = true;
const open = new Set<net.Socket>();

/** One dripping upload from `address`; when it ends, the next one starts at once. */
function drip(i: number, address: string): void {
  if (!running) return;
  const started = performance.now();
  const s = net.connect({ port, host: '127.0.0.1', localAddress: address });
  open.add(s);
  let got = '';
  let timer: NodeJS.Timeout | undefined;
  s.on('connect', () => {
    s.write(
      `POST /api/v1/messages HTTP/1.1\r\nHost: bench.test\r\nAuthorization: ${basicAuth(100_000 + i)}\r\n` +
        'Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 10000\r\n\r\nt',
    );
    timer = setInterval(() => s.write('x'), everyMs);
  });
  s.on('data', (d) => {
    got += String(d);
  });
  s.on('error', () => {});
  s.on('close', () => {
    clearInterval(timer);
    open.delete(s);
    const line = got.slice(0, got.indexOf('\r\n')) || 'closed without an answer';
    if (running) {
      outcomes.set(line, (outcomes.get(line) ?? 0) + 1);
      heldMs.push(performance.now() - started);
    }
    setImmediate(() => drip(i, address));
  });
}

const alone = await probes((seconds / 2) * 1000);
for (let i = 0; i < drips; i++) drip(i, `127.0.0.${1 + (i % addresses)}`);
// Let the drips take what they can before measuring.
await new Promise((r) => setTimeout(r, 3_000));
const beside = await probes(seconds * 1000);
running = false;
for (const s of open) s.destroy();
await shim.stop();
await upstream.stop();

const held = Float64Array.from(heldMs).sort();
const line = (name: string, r: typeof alone) =>
  `${name.padEnd(40)} n=${String(r.n).padStart(4)}  ${r.statuses}  p50 ${r.p50.toFixed(1)} ms  p99 ${r.p99.toFixed(1)} ms  max ${r.max.toFixed(0)} ms  ≥ 2 s: ${r.slow}`;
process.stdout.write(
  `X11 drips: ${drips} uploads from ${addresses} address(es), a byte every ${everyMs} ms, each re-opened when it ends; probes for ${seconds} s\n` +
    `${line('pass-through GET, alone', alone)}\n` +
    `${line('pass-through GET, beside the drips', beside)}\n` +
    `the drips' answers: ${[...outcomes].map(([k, n]) => `${n} × ${k}`).join('; ')}\n` +
    `each drip held: p50 ${percentile(held, 50).toFixed(0)} ms, p99 ${percentile(held, 99).toFixed(0)} ms (${held.length} ended)\n` +
    `target: every probe answered within 2 s: ${beside.slow === 0 && !/no answer/.test(beside.statuses) ? 'met' : 'NOT met'}\n`,
);
