import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ROOT, spawnChild, type Child } from './children.js';
import { findNginx, startNginx } from './nginx.js';
import { formatProfile, summariseProfile } from './profile-summary.js';
import { basicAuth, SMALL_PATH } from './synthetic-upstream.js';

/**
 * B4 on its own (issue 19 §1): the pass-through against nginx in the same run, side by side,
 * with wrk as the load generator (a C program: it takes less of the two shared cores than a
 * Node one would).
 *
 *   node --import tsx bench/passthrough.ts [--seconds 10] [--rounds 2] [--connections 50]
 *        [--profile DIR] [--before DIR] [--no-variants] [--workers 2] [--redis URL]
 *
 * Targets: the upstream directly, nginx (`worker_processes auto`, upstream keepalive pool, an
 * access log), and the shim as shipped (log level info to a discarded stdout, metrics on);
 * with `--before DIR`, also the shim of another checkout (DIR, e.g. a worktree of an older
 * commit) in the same run; with `--workers N` (default 2; 0: none), also the shim started by its
 * CLI with `--workers N --redis URL` (node:cluster, one process per core, as nginx's
 * `worker_processes auto`). Each target runs in turn, `--rounds` times, best run kept.
 * Variants (unless --no-variants): a 1 MiB answer, a 1 MiB upload, and long polls (GET
 * /api/v1/events held 200 ms by the upstream, 200 connections), so a gain on the small GET is
 * not paid for on the streaming paths.
 */

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '2' },
    connections: { type: 'string', default: '50' },
    profile: { type: 'string' },
    before: { type: 'string' },
    'no-variants': { type: 'boolean', default: false },
    workers: { type: 'string', default: '2' },
    redis: { type: 'string', default: process.env.REDIS_URL || 'redis://127.0.0.1:6379' },
  },
});
const workers = Number(values.workers);
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const connections = Number(values.connections);

interface WrkResult {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
}

const ms = (text: string): number => {
  const m = /^([\d.]+)(us|ms|s)$/.exec(text.trim());
  if (!m) return Number.NaN;
  const v = Number(m[1]);
  return m[2] === 'us' ? v / 1000 : m[2] === 's' ? v * 1000 : v;
};

function wrk(url: string, o: { connections: number; seconds: number; script?: string; headers?: Record<string, string> }): WrkResult {
  const args = ['-t2', `-c${o.connections}`, `-d${o.seconds}s`, '--latency', '--timeout', '10s'];
  for (const [k, v] of Object.entries(o.headers ?? {})) args.push('-H', `${k}: ${v}`);
  if (o.script) args.push('-s', o.script);
  args.push(url);
  const r = spawnSync('wrk', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`wrk failed: ${r.stderr || r.stdout}`);
  const out = r.stdout;
  const line = (re: RegExp) => re.exec(out)?.[1] ?? '';
  const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return {
    rps: Number(line(/Requests\/sec:\s+([\d.]+)/)),
    p50: ms(line(/\n\s+50%\s+(\S+)/)),
    p99: ms(line(/\n\s+99%\s+(\S+)/)),
    errors: errors ? errors.slice(1).reduce((a, b) => a + Number(b), 0) : 0,
    non2xx: Number(line(/Non-2xx or 3xx responses:\s+(\d+)/) || 0),
  };
}

const log = (s: string) => process.stderr.write(`${s}\n`);

/**
 * The shim as its CLI starts it with `--workers N --redis URL`: the URL once every worker logged
 * its start-up line; the request log is read and dropped, as a discarded stdout would be.
 */
async function startClusterShim(
  upstream: string,
  n: number,
  redis: string,
  configDir: string,
): Promise<{ url: string; stop(): Promise<void> }> {
  // A key prefix of its own: the Redis may be shared.
  const config = join(configDir, 'workers.json');
  writeFileSync(config, JSON.stringify({ store: { keyPrefix: `zcs-bench:${randomBytes(4).toString('hex')}:` } }));
  const args = ['--import', 'tsx', 'src/cli.ts', '--upstream', upstream, '--port', '0', '--log-level', 'info', '--coalesce-ms', '5000'];
  const proc = spawn(process.execPath, [...args, '--workers', String(n), '--redis', redis, '--config', config], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const url = await new Promise<string>((resolve, reject) => {
    let seen = 0;
    let rest = '';
    const onData = (d: Buffer) => {
      const lines = (rest + d.toString()).split('\n');
      rest = lines.pop()!;
      for (const line of lines) {
        if (!line.includes('"msg":"zulip-compat-shim listening"')) continue;
        if (++seen === n) {
          proc.stdout!.off('data', onData);
          proc.stdout!.resume();
          resolve(String((JSON.parse(line) as { listen: string }).listen));
        }
      }
    };
    proc.stdout!.on('data', onData);
    void exited.then(() => reject(new Error('the shim with --workers exited before it was ready')));
  });
  return {
    url,
    async stop() {
      proc.kill('SIGTERM');
      const killer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(killer);
    },
  };
}
const dir = mkdtempSync(join(tmpdir(), 'zcs-bench-pt-'));
const uploadScript = join(dir, 'upload.lua');
writeFileSync(
  uploadScript,
  'wrk.method = "POST"\nwrk.body = string.rep("x", 1048576)\nwrk.headers["Content-Type"] = "application/octet-stream"\n',
);

const children: Child[] = [];
const load = loadavg();
const up = await spawnChild('passthrough-upstream.ts', []);
children.push(up);
const nginx = findNginx(false);
const ng = nginx.bin !== undefined ? await startNginx(nginx.bin, up.url, 'auto') : undefined;
const shim = await spawnChild('shim-process.ts', [up.url, '5000', 'info']);
children.push(shim);
const targets: Array<[string, string]> = [['direct', up.url]];
if (ng) targets.push(['nginx (worker_processes auto)', ng.url]);
targets.push(['shim', shim.url]);
const clustered = workers > 0 ? await startClusterShim(up.url, workers, values.redis!, dir) : undefined;
if (clustered) targets.push([`shim --workers ${workers}`, clustered.url]);
if (values.before) {
  const before = await spawnChild(join(values.before, 'bench', 'shim-process.ts'), [up.url, '5000', 'info']);
  children.push(before);
  targets.push(['shim before', before.url]);
}

type Row = { variant: string; target: string } & WrkResult;
const rows: Row[] = [];
const best = (variant: string, target: string) =>
  rows
    .filter((r) => r.variant === variant && r.target === target)
    .reduce<Row | undefined>((a, b) => (!a || b.rps > a.rps ? b : a), undefined);

try {
  const auth = { authorization: basicAuth(0) };
  const variants: Array<{ name: string; path: string; connections: number; script?: string; seconds: number }> = [
    { name: `small GET ${SMALL_PATH}`, path: SMALL_PATH, connections, seconds },
  ];
  if (!values['no-variants']) {
    variants.push(
      { name: '1 MiB answer', path: '/bench/1mib', connections: 10, seconds: Math.max(3, seconds / 2) },
      { name: '1 MiB upload', path: '/bench/upload', connections: 10, script: uploadScript, seconds: Math.max(3, seconds / 2) },
      { name: 'long poll, 200 ms, 200 connections', path: '/api/v1/events?ms=200', connections: 200, seconds: Math.max(3, seconds / 2) },
    );
  }
  for (const v of variants) {
    log(`${v.name}: warm-up …`);
    for (const [, url] of targets) wrk(`${url}${v.path}`, { ...v, seconds: 1, headers: auth });
    for (let r = 0; r < rounds; r++) {
      for (const [name, url] of targets) {
        const profiling = values.profile && name === 'shim' && r === 0 && v.path === SMALL_PATH;
        if (profiling) await shim.call('profile-start');
        const res = wrk(`${url}${v.path}`, { ...v, headers: auth });
        if (profiling) await shim.call('profile-stop', { file: join(values.profile!, 'b4-shim.cpuprofile') });
        rows.push({ variant: v.name, target: name, ...res });
        log(
          `  ${name}: ${res.rps.toFixed(0)} req/s, p50 ${res.p50} ms, p99 ${res.p99} ms${res.errors || res.non2xx ? `, ${res.errors} errors, ${res.non2xx} non-2xx` : ''}`,
        );
      }
    }
  }
} finally {
  await ng?.stop();
  await clustered?.stop();
  for (const c of children.reverse()) await c.stop();
  rmSync(dir, { recursive: true, force: true });
}

const out: string[] = [];
out.push(
  `- Date: ${new Date().toISOString()}; load average at start ${load.map((l) => l.toFixed(2)).join(' / ')}, at end ${loadavg()
    .map((l) => l.toFixed(2))
    .join(' / ')} (a shared 2-core machine: compare within a run)`,
);
out.push(
  `- wrk -t2, ${rounds} round(s) alternating targets, best kept; ${clustered ? `shim --workers ${workers} with --redis (node:cluster); ` : ''}nginx: ${ng ? `${nginx.bin !== undefined ? nginx.version : ''}, worker_processes auto, keepalive 64, access log` : 'not installed'}`,
);
out.push('');
out.push('| variant | target | req/s | p50 ms | p99 ms | × nginx req/s | p99 / nginx p99 |');
out.push('| --- | --- | ---: | ---: | ---: | ---: | ---: |');
for (const variant of [...new Set(rows.map((r) => r.variant))]) {
  const ref = best(variant, 'nginx (worker_processes auto)');
  for (const [name] of targets) {
    const b = best(variant, name);
    if (!b) continue;
    const ratio = ref ? (b.rps / ref.rps).toFixed(2) : '–';
    const p99 = ref ? (b.p99 / ref.p99).toFixed(2) : '–';
    out.push(`| ${variant} | ${name} | ${b.rps.toFixed(0)} | ${b.p50} | ${b.p99} | ${ratio} | ${p99} |`);
  }
}
if (values.profile) {
  out.push('');
  out.push('Shim CPU profile, small GET (first round):');
  out.push('```');
  out.push(formatProfile(summariseProfile(join(values.profile, 'b4-shim.cpuprofile'), 15)));
  out.push('```');
}
process.stdout.write(`${out.join('\n')}\n`);
