import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * B4's reference: Debian's nginx as a plain `proxy_pass` reverse proxy with kept-alive
 * upstream connections, started on loopback from a configuration in a temporary directory, and
 * stopped by its own pid. With a shim, B4's production path: the same server block with the
 * `location` blocks of deploy/nginx-zulip-shim.conf included, as Zulip's nginx includes them
 * (topology b of docs/deployment.md): the endpoints the shim changes go to the shim, everything
 * else straight to the upstream.
 */

export type NginxFound = { bin: string; version: string } | { bin?: undefined; reason: string };

function locate(): string | undefined {
  for (const p of ['/usr/sbin/nginx', '/usr/bin/nginx', '/usr/local/sbin/nginx', '/usr/local/bin/nginx']) if (existsSync(p)) return p;
  return onPath('nginx');
}

function versionOf(bin: string): string {
  const r = spawnSync(bin, ['-v'], { encoding: 'utf8' });
  return (r.stderr || r.stdout).trim().replace(/^nginx version:\s*/, '');
}

/**
 * Finds a program of the benches (nginx, wrk): on PATH, or installed from Debian's package with
 * apt-get when that is allowed and possible (root on Linux).
 */
export function findProgram(
  name: string,
  allowInstall: boolean,
  locateIt: () => string | undefined = () => onPath(name),
): string | { reason: string } {
  let bin = locateIt();
  if (bin) return bin;
  const how = `apt-get install -y ${name}`;
  if (!allowInstall) return { reason: `${name} not installed (installation not allowed in this run; \`${how}\` as root installs it)` };
  if (process.platform !== 'linux' || process.getuid?.() !== 0) return { reason: `${name} not installed, and \`${how}\` needs root` };
  if (!onPath('apt-get')) return { reason: `${name} not installed, and no apt-get` };
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = () => spawnSync('apt-get', ['install', '-y', name], { stdio: 'inherit', env, timeout: 300_000 }).status === 0;
  if (!install()) {
    spawnSync('apt-get', ['update'], { stdio: 'inherit', env, timeout: 300_000 });
    if (!install()) return { reason: `${how} failed` };
  }
  bin = locateIt();
  return bin ?? { reason: `${name} installed but not found on PATH` };
}

function onPath(name: string): string | undefined {
  const which = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  const p = which.stdout.trim();
  return which.status === 0 && p ? p : undefined;
}

/** Finds nginx; when missing, installs Debian's package with apt-get if this is possible. */
export function findNginx(allowInstall: boolean): NginxFound {
  const bin = findProgram('nginx', allowInstall, locate);
  return typeof bin === 'string' ? { bin, version: versionOf(bin) } : bin;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

async function waitForPort(port: number, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    const ok = await new Promise<boolean>((r) => {
      const c = net.connect(port, '127.0.0.1');
      c.once('connect', () => {
        c.destroy();
        r(true);
      });
      c.once('error', () => r(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`nginx did not listen on ${port} within ${timeoutMs} ms`);
}

export interface RunningNginx {
  url: string;
  stop(): Promise<void>;
}

/** The topology (b) location blocks, as installed in Zulip's `zulip-include/app.d/`. */
const SHIM_LOCATIONS = resolve(fileURLToPath(import.meta.url), '..', '..', 'deploy', 'nginx-zulip-shim.conf');

/** Zulip's `zulip-include/api_headers` (its CORS headers), which the /api/ blocks include. */
const ZULIP_API_HEADERS = `add_header Access-Control-Allow-Origin *;
add_header Access-Control-Allow-Headers Authorization;
add_header Access-Control-Allow-Methods 'GET, POST, DELETE, PUT, PATCH, HEAD';
`;

/**
 * `workers`: nginx's worker_processes (`auto`: one per core, as nginx is deployed). `shimUrl`:
 * the production path, the shim's locations included and sent to the shim there.
 */
export async function startNginx(bin: string, upstreamUrl: string, workers: number | 'auto' = 1, shimUrl?: string): Promise<RunningNginx> {
  const dir = mkdtempSync(join(tmpdir(), 'zcs-bench-nginx-'));
  // Started as root, nginx's workers run as `nobody`: they must reach their temp directories
  // in here (a 0700 directory made every buffered upload a 500).
  chmodSync(dir, 0o755);
  const port = await freePort();
  const up = new URL(upstreamUrl);
  let shimUpstream = '';
  let shimLocations = '';
  if (shimUrl) {
    const shim = new URL(shimUrl);
    const headers = join(dir, 'api_headers');
    writeFileSync(headers, ZULIP_API_HEADERS);
    const locations = join(dir, 'zulip-compat-shim.conf');
    writeFileSync(locations, readFileSync(SHIM_LOCATIONS, 'utf8').replaceAll('/etc/nginx/zulip-include/api_headers', headers));
    // As deploy/nginx-zulip-shim-upstream.conf declares it.
    shimUpstream = `
  upstream zulip_compat_shim {
    server ${shim.hostname}:${shim.port};
    keepalive 32;
  }`;
    shimLocations = `
    include ${locations};`;
  }
  const conf = `
worker_processes ${workers};
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log ${dir}/access.log;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream zulip {
    server ${up.hostname}:${up.port};
    keepalive 64;
  }${shimUpstream}
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://zulip;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_read_timeout 120s;
      # Uploads stream to the upstream as they arrive, as the shim streams them (T1).
      proxy_request_buffering off;
      client_max_body_size 8m;
    }${shimLocations}
  }
}
`;
  writeFileSync(join(dir, 'nginx.conf'), conf);
  const proc: ChildProcess = spawn(bin, ['-p', dir, '-c', join(dir, 'nginx.conf')], { stdio: ['ignore', 'ignore', 'inherit'] });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  try {
    await waitForPort(port, 10_000);
  } catch (e) {
    proc.kill('SIGKILL');
    throw e;
  }
  return {
    url: `http://127.0.0.1:${port}`,
    async stop() {
      proc.kill('SIGQUIT'); // graceful stop of this master and its worker
      const killer = setTimeout(() => proc.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(killer);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
