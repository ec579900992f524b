import net from 'node:net';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { spawnChild } from './children.js';
import { percentile, send } from './load.js';
import { basicAuth, PRESENCE_PATH } from './synthetic-upstream.js';

/**
 * X11's descriptor figure: `npm run bench -- long-polls [--polls 12000] [--descriptors 20000]`.
 * `polls` clients each hold a `GET /api/v1/events` long poll (two descriptors each in the shim:
 * theirs and its upstream request) against a shim whose process may open `descriptors`, its
 * connection cap `auto`. Meanwhile 20 clients connected before them poll presence, 5 new
 * clients at a time each poll presence on a connection of their own (a client arriving while
 * the shim is at its cap), and a probe opens a new connection to `/healthz` every 250 ms: are
 * they answered, how fast, and what do the long polls past the cap get? The shim and a
 * synthetic 2.1 upstream of 2,000 users run in child processes.
 */

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== 'long-polls'),
  options: { polls: { type: 'string' }, seconds: { type: 'string' }, descriptors: { type: 'string' } },
  strict: true,
});
const polls = Number(values.polls ?? 12_000);
const seconds = Number(values.seconds ?? 15);
const descriptors = Number(values.descriptors ?? 20_000);

const upstream = await spawnChild('upstream-process.ts', ['2.1', '2000', '0.02', '60000']);
const shim = await spawnChild('shim-process.ts', [upstream.url, '5000', 'warn'], { descriptors });
const { port } = new URL(shim.url);
const pool = new Pool(shim.url, { connections: 20, pipelining: 1 });
// The clients already connected: one request each, so their connections are open before the flood.
await Promise.all(Array.from({ length: 20 }, (_, i) => send(pool, presenceReq(i, -1))));

function presenceReq(i: number, id: number) {
  return {
    method: 'POST' as const,
    path: PRESENCE_PATH,
    headers: { authorization: basicAuth(i), 'content-type': 'application/x-www-form-urlencoded', host: 'bench.test' },
    body: `status=active&last_update_id=${id}`,
  };
}

/** One raw request on a new connection; its status line, or what went wrong. */
function rawOnce(request: string, keep: net.Socket[]): Promise<string> {
  return new Promise((resolve) => {
    const s = net.connect(Number(port), '127.0.0.1', () => s.write(request));
    keep.push(s);
    let got = '';
    s.on('data', (d) => {
      got += String(d);
      if (got.includes('\r\n')) resolve(got.slice(0, got.indexOf('\r\n')));
    });
    s.on('error', (e) => resolve(`error ${(e as NodeJS.ErrnoException).code}`));
    s.on('close', () => resolve(got ? got.slice(0, got.indexOf('\r\n')) : 'held, no answer until the bench closed it'));
  });
}

/** A new client's presence poll, on a connection of its own that closes after the answer. */
function newClientPresence(i: number): string {
  const body = 'status=active&last_update_id=-1';
  return (
    `POST ${PRESENCE_PATH} HTTP/1.1\r\nHost: bench.test\r\nAuthorization: ${basicAuth(1000 + i)}\r\n` +
    `Content-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`
  );
}

const held: net.Socket[] = [];
const firstAnswers = new Map<string, number>();
const longPoll = `GET /api/v1/events?queue_id=q&last_event_id=-1 HTTP/1.1\r\nHost: bench.test\r\nAuthorization: ${basicAuth(1)}\r\n\r\n`;
const opened = Array.from({ length: polls }, async () => {
  const line = await rawOnce(longPoll, held);
  firstAnswers.set(line, (firstAnswers.get(line) ?? 0) + 1);
});
// Answered only for those past the cap (or at the heartbeat): not awaited.
void Promise.all(opened);
// Measured once every long poll has reached the shim (held or refused), or after a minute.
const reachedBy = performance.now() + 60_000;
const counter = (text: string, name: string) => Number(new RegExp(`^zulip_compat_shim_${name} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
for (;;) {
  const text = await shim.call<string>('metrics');
  const reached = counter(text, 'client_connections') + counter(text, 'client_connections_refused_total');
  if (reached >= polls + 20 || performance.now() > reachedBy) break;
  await new Promise((r) => setTimeout(r, 500));
}
await new Promise((r) => setTimeout(r, 1_000));

const presenceMs: number[] = [];
let presenceErrors = 0;
const probes = new Map<string, number>();
const probeMs: number[] = [];
const newClients = new Map<string, number>();
const newClientMs: number[] = [];
const until = performance.now() + seconds * 1000;
const ids = new Array<number>(20).fill(-1);
await Promise.all([
  ...Array.from({ length: 20 }, async (_, i) => {
    while (performance.now() < until) {
      try {
        const s = await send(pool, presenceReq(i, ids[i]!));
        presenceMs.push(s.ms);
        if (s.status !== 200) presenceErrors++;
        const m = /"presence_last_update_id":(-?\d+)/.exec(s.tail);
        if (m) ids[i] = Number(m[1]);
      } catch {
        presenceErrors++;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }),
  ...Array.from({ length: 5 }, async (_, k) => {
    const sockets: net.Socket[] = [];
    for (let n = 0; performance.now() < until; n++) {
      const t = performance.now();
      const line = await rawOnce(newClientPresence(k * 10_000 + n), sockets);
      if (line.includes(' 200 ')) newClientMs.push(performance.now() - t);
      newClients.set(line, (newClients.get(line) ?? 0) + 1);
      for (const s of sockets.splice(0)) s.destroy();
      await new Promise((r) => setTimeout(r, 100));
    }
  }),
  (async () => {
    const sockets: net.Socket[] = [];
    while (performance.now() < until) {
      const t = performance.now();
      const line = await rawOnce('GET /healthz HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n', sockets);
      probeMs.push(performance.now() - t);
      probes.set(line, (probes.get(line) ?? 0) + 1);
      await new Promise((r) => setTimeout(r, 250));
    }
    for (const s of sockets) s.destroy();
  })(),
]);
const stats = await shim.call<{ rss?: number }>('memory').catch(() => ({}) as { rss?: number });
const metricsText = await shim.call<string>('metrics').catch(() => '');
const gauge = (name: string) => counter(metricsText, name);
for (const s of held) s.destroy();
await pool.close();
await shim.stop();
await upstream.stop();

const sorted = Float64Array.from(presenceMs).sort();
const probeSorted = Float64Array.from(probeMs).sort();
const newSorted = Float64Array.from(newClientMs).sort();
const list = (m: Map<string, number>) => [...m].map(([k, n]) => `${n} × ${k || '(nothing yet)'}`).join('; ');
process.stdout.write(
  `X11 long polls: ${polls} held GET /events, ${seconds} s, shim limited to ${descriptors} descriptors\n` +
    `their first answers: ${list(firstAnswers)}\n` +
    `presence (20 clients connected before): n=${presenceMs.length}, errors ${presenceErrors}, p50 ${percentile(sorted, 50).toFixed(1)} ms, p99 ${percentile(sorted, 99).toFixed(1)} ms\n` +
    `presence of new clients (a connection each, to its first status line): ${list(newClients)}; those answered 200: p50 ${percentile(newSorted, 50).toFixed(1)} ms, p99 ${percentile(newSorted, 99).toFixed(1)} ms\n` +
    `/healthz on new connections: ${list(probes)}; p99 ${percentile(probeSorted, 99).toFixed(1)} ms\n` +
    `the shim's connections at the end: ${gauge('client_connections')} open, cap ${gauge('client_connections_max')}, ${gauge('client_connections_refused_total')} refused\n` +
    (stats.rss ? `shim RSS ${(stats.rss / 2 ** 20).toFixed(0)} MiB\n` : ''),
);
