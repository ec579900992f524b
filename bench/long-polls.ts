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
 * connection cap `auto`. For `seconds` before the long polls and again beside them, 20 clients
 * connected before them poll presence, 5 new clients at a time each poll presence on a
 * connection of their own (a client arriving while the shim is at its cap), and a probe opens a
 * new connection to `/healthz` every 250 ms: are they answered, how fast against the phase
 * before, and what do the long polls past the cap get? The shim and a synthetic 2.1 upstream of
 * 2,000 users run in child processes.
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

/** What one phase saw: each kind of request's first answers and the latencies of those answered 200. */
interface Phase {
  presence: { ms: number[]; errors: number };
  newClients: { lines: Map<string, number>; ms: number[] };
  probes: { lines: Map<string, number>; ms: number[] };
}

const pauseMs = (ms: number) => new Promise((r) => setTimeout(r, ms));
const ids = new Array<number>(20).fill(-1);

/** The 20 connected clients poll presence every 200 ms until `until`, each continuing from its id. */
async function connectedClients(until: number, phase: Phase): Promise<void> {
  await Promise.all(
    Array.from({ length: 20 }, async (_, i) => {
      while (performance.now() < until) {
        try {
          const s = await send(pool, presenceReq(i, ids[i]!));
          phase.presence.ms.push(s.ms);
          if (s.status !== 200) phase.presence.errors++;
          const m = /"presence_last_update_id":(-?\d+)/.exec(s.tail);
          if (m) ids[i] = Number(m[1]);
        } catch {
          phase.presence.errors++;
        }
        await pauseMs(200);
      }
    }),
  );
}

/** One request at a time on new connections until `until`, `gapMs` apart: first lines and latencies. */
async function onNewConnections(until: number, request: (n: number) => string, gapMs: number, into: Phase['newClients']): Promise<void> {
  const sockets: net.Socket[] = [];
  for (let n = 0; performance.now() < until; n++) {
    const t = performance.now();
    const line = await rawOnce(request(n), sockets);
    if (line.includes(' 200 ')) into.ms.push(performance.now() - t);
    into.lines.set(line, (into.lines.get(line) ?? 0) + 1);
    for (const s of sockets.splice(0)) s.destroy();
    await pauseMs(gapMs);
  }
}

/** `seconds` of the connected clients, 5 new clients at a time, and a /healthz probe. */
async function measure(): Promise<Phase> {
  const phase: Phase = {
    presence: { ms: [], errors: 0 },
    newClients: { lines: new Map(), ms: [] },
    probes: { lines: new Map(), ms: [] },
  };
  const until = performance.now() + seconds * 1000;
  await Promise.all([
    connectedClients(until, phase),
    ...Array.from({ length: 5 }, (_, k) => onNewConnections(until, (n) => newClientPresence(k * 100_000 + n), 100, phase.newClients)),
    onNewConnections(until, () => 'GET /healthz HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n', 250, phase.probes),
  ]);
  return phase;
}

const alone = await measure();
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
  await pauseMs(500);
}
await pauseMs(1_000);
const beside = await measure();
const stats = await shim.call<{ rss?: number }>('memory').catch(() => ({}) as { rss?: number });
const metricsText = await shim.call<string>('metrics').catch(() => '');
const gauge = (name: string) => counter(metricsText, name);
for (const s of held) s.destroy();
await pool.close();
await shim.stop();
await upstream.stop();

const list = (m: Map<string, number>) => [...m].map(([k, n]) => `${n} × ${k || '(nothing yet)'}`).join('; ');
const pcts = (ms: number[]) => {
  const sorted = Float64Array.from(ms).sort();
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
};
const report = (name: string, p: Phase) => {
  const presence = pcts(p.presence.ms);
  const fresh = pcts(p.newClients.ms);
  return (
    `${name}:\n` +
    `  presence (20 clients connected before): n=${p.presence.ms.length}, errors ${p.presence.errors}, p50 ${presence.p50.toFixed(1)} ms, p99 ${presence.p99.toFixed(1)} ms\n` +
    `  presence of new clients (a connection each, to its first status line): ${list(p.newClients.lines)}; those answered 200: p50 ${fresh.p50.toFixed(1)} ms, p99 ${fresh.p99.toFixed(1)} ms\n` +
    `  /healthz on new connections: ${list(p.probes.lines)}; p99 ${pcts(p.probes.ms).p99.toFixed(1)} ms\n`
  );
};
const ratio = pcts(beside.newClients.ms).p99 / pcts(alone.newClients.ms).p99;
process.stdout.write(
  `X11 long polls: ${polls} GET /events held open, ${seconds} s each phase, shim limited to ${descriptors} descriptors\n` +
    `the long polls' first answers: ${list(firstAnswers)}\n` +
    report('before the long polls', alone) +
    report('beside them', beside) +
    `new clients' presence p99 beside the long polls ÷ before: ${ratio.toFixed(2)}×\n` +
    `the shim's connections at the end: ${gauge('client_connections')} open, cap ${gauge('client_connections_max')}, ${gauge('client_connections_refused_total')} refused\n` +
    (stats.rss ? `shim RSS ${(stats.rss / 2 ** 20).toFixed(0)} MiB\n` : ''),
);
