/**
 * What Express in front of the pass-through would cost (why the shim serves from a raw http server): requests/s and latency of a
 * small JSON answer, measured with autocannon, for
 *   direct          the upstream itself
 *   raw → proxy     a raw http server handing every request to the pass-through (src/proxy/passthrough.ts)
 *   … + metrics     the same with the upstream metrics hook (route label, counter, histogram)
 *   express → proxy the same pass-through behind `express()` + `app.use((req, res) => abortWithClient(proxy.web(req, res, 'bench', NOT_IN_TABLE)))`
 *   shim            the shim as built (createShim: raw server, request log, metrics, pass-through)
 *   shim, info log  the same with a request log line per request (to /dev/null)
 *
 *   node --import tsx bench/passthrough-express.ts [--connections 50] [--duration 10] [--runs 1]
 *
 * Every server runs in its own process and autocannon in another, so none shares an event loop
 * with the load generator. On a small machine they still share the CPUs: compare ratios.
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { shimPassThroughAlone } from './bare-passthrough.js';

type Role = 'upstream' | 'raw' | 'raw-metrics' | 'express' | 'shim';

/** A 114-byte JSON answer, the size used in ../shared/reference/anchors.md §6. */
const BODY = JSON.stringify({ result: 'success', msg: '', zulip_version: '2.1.7', zulip_feature_level: 0, padding: 'x'.repeat(24) });

async function listen(server: http.Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return (server.address() as AddressInfo).port;
}

/** Child side: start one server and report its port to the parent. */
async function serve(role: Role, upstream: string, logLevel: string): Promise<number> {
  if (role === 'upstream') {
    const server = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY) });
      res.end(BODY);
    });
    server.keepAliveTimeout = 65_000;
    return listen(server);
  }
  const { loadConfig } = await import('../src/config/index.js');
  const { createLogger } = await import('../src/observability/logger.js');
  const config = loadConfig(['--upstream', upstream, '--port', '0', '--log-level', logLevel], {}).config;
  const log = createLogger(logLevel);
  if (role === 'shim') {
    const { createShim } = await import('../src/server.js');
    const shim = createShim({ config, log, target: upstream, upstreamId: upstream });
    return (await shim.listen(0, '127.0.0.1')).port;
  }
  const { handler } = await shimPassThroughAlone(upstream, { logLevel, observe: role === 'raw-metrics' });
  if (role === 'raw' || role === 'raw-metrics') return listen(http.createServer(handler));
  const { default: express } = await import('express');
  const app = express();
  app.use(handler);
  return listen(http.createServer(app));
}

interface Started {
  child: ChildProcess;
  url: string;
}

function start(role: Role, upstream = '', logLevel = 'warn'): Promise<Started> {
  const child = fork(fileURLToPath(import.meta.url), ['--role', role, '--upstream', upstream, '--log-level', logLevel], {
    execArgv: ['--import', 'tsx'],
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    child.once('message', (m: { port: number }) => resolve({ child, url: `http://127.0.0.1:${m.port}` }));
    child.once('exit', (code) => reject(new Error(`${role} exited with ${code}`)));
  });
}

interface Result {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
}

function autocannon(url: string, connections: number, duration: number): Promise<Result> {
  const bin = createRequire(import.meta.url).resolve('autocannon/autocannon.js');
  const child = spawn(process.execPath, [bin, '-c', String(connections), '-d', String(duration), '-j', url], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  return new Promise((resolve, reject) => {
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`autocannon exited with ${code}`));
      const r = JSON.parse(out) as {
        requests: { average: number };
        latency: { p50: number; p99: number };
        errors: number;
        timeouts: number;
        non2xx: number;
      };
      resolve({ rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, errors: r.errors + r.timeouts, non2xx: r.non2xx });
    });
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      role: { type: 'string' },
      upstream: { type: 'string', default: '' },
      'log-level': { type: 'string', default: 'warn' },
      connections: { type: 'string', default: '50' },
      duration: { type: 'string', default: '10' },
      runs: { type: 'string', default: '1' },
    },
  });
  if (values.role) {
    const port = await serve(values.role as Role, values.upstream!, values['log-level']!);
    process.send!({ port });
    return;
  }

  const connections = Number(values.connections);
  const duration = Number(values.duration);
  const runs = Number(values.runs);
  const upstream = await start('upstream');
  const targets: Array<[string, Started]> = [
    ['direct', upstream],
    ['raw → proxy', await start('raw', upstream.url)],
    ['raw → proxy + metrics', await start('raw-metrics', upstream.url)],
    ['express → proxy', await start('express', upstream.url)],
    ['shim', await start('shim', upstream.url)],
    ['shim, info log', await start('shim', upstream.url, 'info')],
  ];
  console.log(`Node ${process.version}, ${cpus().length} CPUs, autocannon -c ${connections} -d ${duration}, ${BODY.length}-byte JSON`);
  const rows: string[] = [];
  try {
    for (let run = 1; run <= runs; run++) {
      for (const [name, t] of targets) {
        await autocannon(t.url, 10, 2); // warm-up: JIT and kept-alive upstream sockets
        // Other work on the machine skews everything: the 1-minute load average goes with each row.
        const load = loadavg()[0]!.toFixed(1);
        const r = await autocannon(t.url, connections, duration);
        const row = `| ${name} | ${run} | ${Math.round(r.rps)} | ${r.p50} | ${r.p99} | ${r.errors + r.non2xx} | ${load} |`;
        rows.push(row);
        console.log(row);
      }
    }
  } finally {
    for (const [, t] of targets) t.child.kill();
  }
  console.log(`\n| path | run | req/s | p50 ms | p99 ms | errors + non-2xx | load |\n|---|---|---|---|---|---|---|\n${rows.join('\n')}`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
