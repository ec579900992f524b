import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { bareUndiciPassThrough, shimPassThroughAlone } from './bare-passthrough.js';
import { serveParent, spawnChild, type Child } from './children.js';
import { cannon } from './load.js';
import { findNginx, startNginx } from './nginx.js';
import { basicAuth, SMALL_PATH } from './synthetic-upstream.js';

/**
 * Where B4's pass-through time goes: the same small JSON answer through
 *   direct                  the synthetic upstream itself
 *   nginx                   proxy_pass, one worker, upstream keepalive
 *   shim                    the shim as built (request log, metrics, pass-through), log level info
 *   shim, warn              the same without the request log line
 *   raw → pass-through     a bare http server handing every request to src/proxy/passthrough.ts
 *   raw → undici stream     B4's bare undici pass-through (bench/bare-passthrough.ts): an http
 *                           server streaming through an undici Pool, no X-Forwarded-*, no log
 * each in its own process, autocannon in this one, targets alternated, best run kept.
 *
 *   node --import tsx bench/passthrough-variants.ts [--duration 5] [--rounds 3] [--connections 50]
 */

async function serve(role: string, upstream: string): Promise<void> {
  const { handler, close } =
    role === 'raw-proxy' ? await shimPassThroughAlone(upstream, { logLevel: 'warn' }) : bareUndiciPassThrough(upstream);
  const server = http.createServer(handler);
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  serveParent(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {}, async () => {
    server.closeAllConnections();
    server.close();
    await close();
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      role: { type: 'string' },
      upstream: { type: 'string', default: '' },
      duration: { type: 'string', default: '5' },
      rounds: { type: 'string', default: '3' },
      connections: { type: 'string', default: '50' },
    },
  });
  if (values.role) return serve(values.role, values.upstream!);

  const duration = Number(values.duration);
  const rounds = Number(values.rounds);
  const connections = Number(values.connections);
  const children: Child[] = [];
  const up = await spawnChild('upstream-process.ts', ['2.1', '200', '0', '60000']);
  children.push(up);
  const targets: Array<[string, string]> = [['direct', up.url]];
  const nginx = findNginx(false);
  const ng = nginx.bin !== undefined ? await startNginx(nginx.bin, up.url) : undefined;
  if (ng) targets.push(['nginx (1 worker)', ng.url]);
  for (const [name, script, args] of [
    ['shim', 'shim-process.ts', [up.url, '5000', 'info']],
    ['shim, warn', 'shim-process.ts', [up.url, '5000', 'warn']],
    ['raw → pass-through', 'passthrough-variants.ts', ['--role', 'raw-proxy', '--upstream', up.url]],
    ['raw → undici stream', 'passthrough-variants.ts', ['--role', 'undici', '--upstream', up.url]],
  ] as const) {
    const c = await spawnChild(script, [...args]);
    children.push(c);
    targets.push([name, c.url]);
  }
  const headers = { authorization: basicAuth(0) };
  const best = new Map<string, { rps: number; p99: number }>();
  try {
    for (const [, url] of targets) await cannon(`${url}${SMALL_PATH}`, connections, 1, headers);
    for (let r = 0; r < rounds; r++) {
      for (const [name, url] of targets) {
        const x = await cannon(`${url}${SMALL_PATH}`, connections, duration, headers);
        if (x.rps > (best.get(name)?.rps ?? 0)) best.set(name, { rps: x.rps, p99: x.p99 });
      }
    }
  } finally {
    await ng?.stop();
    for (const c of children.reverse()) await c.stop();
  }
  const ref = best.get('nginx (1 worker)')?.rps;
  console.log(`| path | req/s (best of ${rounds}) | p99 ms | × nginx |\n|---|---|---|---|`);
  for (const [name, b] of best) console.log(`| ${name} | ${Math.round(b.rps)} | ${b.p99} | ${ref ? (b.rps / ref).toFixed(2) : '–'} |`);
}

await main();
