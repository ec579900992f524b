import net from 'node:net';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { spawnChild } from './children.js';
import { percentile, send, type Req } from './load.js';
import { basicAuth, PRESENCE_PATH } from './synthetic-upstream.js';

/**
 * X11's figure: `npm run bench -- slow [--uploads 1000] [--idle 5000] [--seconds 20]`. Presence
 * polls and own-profile requests of well-behaved clients, first alone, then while `uploads`
 * pass-through uploads drip their bodies (one byte every 5 s, each holding an upstream
 * connection) and `idle` connections sit open; p50/p99 of each phase, and the ratio (target:
 * within 2×). The shim (defaults but the window) and a synthetic 2.1 upstream of 2,000 users
 * run in child processes.
 */

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== 'slow'),
  options: { uploads: { type: 'string' }, idle: { type: 'string' }, seconds: { type: 'string' }, clients: { type: 'string' } },
  strict: true,
});
const uploads = Number(values.uploads ?? 1000);
const idle = Number(values.idle ?? 5000);
const seconds = Number(values.seconds ?? 20);
const clients = Number(values.clients ?? 20);

const upstream = await spawnChild('upstream-process.ts', ['2.1', '2000', '0.02', '60000']);
const shim = await spawnChild('shim-process.ts', [upstream.url, '5000', 'warn']);
const pool = new Pool(shim.url, { connections: clients, pipelining: 1 });
const { port } = new URL(shim.url);

/** `clients` callers, each polling presence (continuing from its id) and reading its own profile in turn, for `seconds`. */
async function measure(): Promise<{ n: number; errors: number; p50: number; p99: number }> {
  const ms: number[] = [];
  let errors = 0;
  const until = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: clients }, async (_, i) => {
      let id = -1;
      for (let k = 0; performance.now() < until; k++) {
        const r: Req =
          k % 2 === 0
            ? {
                method: 'POST',
                path: PRESENCE_PATH,
                headers: { authorization: basicAuth(i), 'content-type': 'application/x-www-form-urlencoded', host: 'bench.test' },
                body: `status=active&last_update_id=${id}`,
              }
            : { method: 'GET', path: '/api/v1/users/me', headers: { authorization: basicAuth(i), host: 'bench.test' } };
        try {
          const s = await send(pool, r);
          ms.push(s.ms);
          if (s.status >= 300 && s.status !== 404) errors++;
          const m = /"presence_last_update_id":(-?\d+)/.exec(s.tail);
          if (m) id = Number(m[1]);
        } catch {
          errors++;
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    }),
  );
  const sorted = Float64Array.from(ms).sort();
  return { n: ms.length, errors, p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
}

function open(): Promise<net.Socket> {
  return new Promise((resolve) => {
    const s = net.connect(Number(port), '127.0.0.1', () => resolve(s));
    s.on('error', () => {});
  });
}

const alone = await measure();
const sockets: net.Socket[] = [];
const drip: NodeJS.Timeout[] = [];
for (let i = 0; i < uploads; i++) {
  const s = await open();
  sockets.push(s);
  s.write(
    `POST /api/v1/messages HTTP/1.1\r\nHost: bench.test\r\nAuthorization: ${basicAuth(100_000 + i)}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 10000\r\n\r\nt`,
  );
  drip.push(setInterval(() => s.write('x'), 5_000));
}
for (let i = 0; i < idle; i++) sockets.push(await open());
const crowded = await measure();
for (const t of drip) clearInterval(t);
for (const s of sockets) s.destroy();
await pool.close();
await shim.stop();
await upstream.stop();

const line = (name: string, r: typeof alone) =>
  `${name.padEnd(34)} n=${String(r.n).padStart(5)}  errors ${r.errors}  p50 ${r.p50.toFixed(1)} ms  p99 ${r.p99.toFixed(1)} ms`;
process.stdout.write(
  `X11: ${clients} clients polling presence and /users/me for ${seconds} s each phase\n` +
    `${line('alone', alone)}\n` +
    `${line(`${uploads} slow uploads + ${idle} idle`, crowded)}\n` +
    `p99 ratio ${(crowded.p99 / alone.p99).toFixed(2)}× (target ≤ 2×): ${crowded.p99 <= 2 * alone.p99 && crowded.errors === 0 ? 'met' : 'NOT met'}\n`,
);
