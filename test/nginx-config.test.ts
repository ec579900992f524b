import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { selfSignedCertificate } from './support/tls-front.js';
import { systemPort } from './support/ports.js';

/**
 * The nginx files of deploy/ are checked by the nginx installed on this machine: `nginx -t` on a
 * wrapper standing in for Zulip's own configuration, and a live run that shows which paths the
 * topology (b) snippet sends to the shim. Skipped, with the reason printed, without nginx.
 */

const DEPLOY = resolve(import.meta.dirname, '..', 'deploy');

function nginxVersion(): [number, number, number] | undefined {
  const r = spawnSync('nginx', ['-v'], { encoding: 'utf8' });
  if (r.error) return undefined;
  const m = /nginx\/(\d+)\.(\d+)\.(\d+)/.exec(`${r.stderr}${r.stdout}`);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

const version = nginxVersion();
const atLeast = (a: number, b: number, c: number) => !!version && (version[0] - a || version[1] - b || version[2] - c) >= 0;
// `-e` (error log on the command line, so no root-owned default log is opened) is 1.19.5+.
const usable = atLeast(1, 19, 5);
if (!usable) {
  console.warn(`nginx-config tests skipped: ${version ? `nginx ${version.join('.')} is older than 1.19.5` : 'nginx is not installed'}`);
}

// The load balancer's TLS listener needs a certificate: a self-signed one, made by openssl.
const cert = usable ? selfSignedCertificate() : undefined;
const certSkip = cert && 'skip' in cert ? cert.skip : undefined;
if (certSkip) console.warn(`nginx-config load balancer tests skipped: ${certSkip}`);
const withCert = usable && !certSkip;

let dir = '';

/** Paths nginx would otherwise take from its build (/var/lib/nginx, /var/log/nginx). */
function localPaths(): string {
  return ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']
    .map((t) => `    ${t === 'client_body' ? 'client_body' : t}_temp_path ${join(dir, 'tmp', t)};`)
    .join('\n');
}

/** Writes a main config around `http` and runs `nginx -t` on it. */
function nginxTest(name: string, httpBody: string): { ok: boolean; output: string } {
  const conf = join(dir, 'conf', `${name}.conf`);
  writeFileSync(conf, `pid ${join(dir, `${name}.pid`)};\nevents {}\nhttp {\n    access_log off;\n${localPaths()}\n${httpBody}\n}\n`);
  const r = spawnSync('nginx', ['-t', '-p', dir, '-c', conf, '-e', 'stderr'], { encoding: 'utf8' });
  return { ok: r.status === 0, output: `${r.stderr}${r.stdout}` };
}

/** Zulip's zulip-include/api_headers, as its `location /api/` includes it. */
const ZULIP_API_HEADERS = [
  'add_header Access-Control-Allow-Origin *;',
  'add_header Access-Control-Allow-Headers Authorization;',
  "add_header Access-Control-Allow-Methods 'GET, POST, DELETE, PUT, PATCH, HEAD';",
  '',
].join('\n');

/** deploy/nginx-zulip-shim.conf with Zulip's include paths pointing at the stand-ins of `dir`. */
function shimSnippet(): string {
  const file = join(dir, 'conf', 'zulip-compat-shim.conf');
  writeFileSync(
    file,
    readFileSync(join(DEPLOY, 'nginx-zulip-shim.conf'), 'utf8').replaceAll(
      '/etc/nginx/zulip-include/api_headers',
      join(dir, 'conf', 'api_headers'),
    ),
  );
  return file;
}

/** What Zulip's nginx provides around the snippets: its upstreams and a main server block. */
function zulipStandIn(appBody: string): string {
  return `
    upstream django { server unix:${join(dir, 'uwsgi-socket')}; }
    upstream tornado { server 127.0.0.1:9800; }
    include ${join(DEPLOY, 'nginx-zulip-shim-upstream.conf')};
    server {
        listen 127.0.0.1:8443;
        server_name zulip.example.com;
${appBody}
        # zulip-include/app ends with: include /etc/nginx/zulip-include/app.d/*.conf;
        include ${shimSnippet()};
    }`;
}

describe.skipIf(!usable)('deploy/ nginx configuration', () => {
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'zcs-nginx-'));
    mkdirSync(join(dir, 'conf'));
    mkdirSync(join(dir, 'tmp'));
    // Zulip ships its own /etc/nginx/uwsgi_params; its first lines are enough here.
    writeFileSync(
      join(dir, 'conf', 'uwsgi_params'),
      'uwsgi_param QUERY_STRING $query_string;\nuwsgi_param REQUEST_METHOD $request_method;\n',
    );
    writeFileSync(join(dir, 'conf', 'api_headers'), ZULIP_API_HEADERS);
    // The directory the compose files mount on /etc/nginx/certs.
    if (cert && !('skip' in cert)) {
      mkdirSync(join(dir, 'certs'));
      writeFileSync(join(dir, 'certs', 'tls.crt'), cert.cert);
      writeFileSync(join(dir, 'certs', 'tls.key'), cert.key, { mode: 0o600 });
    }
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('topology (b): the snippet and its http-context file pass `nginx -t` inside a Zulip-like config', () => {
    const r = nginxTest(
      'zulip',
      zulipStandIn(`
        location /api/ { include uwsgi_params; uwsgi_pass django; }
        location /json/events { proxy_pass http://tornado; }
        location / { include uwsgi_params; uwsgi_pass django; }`),
    );
    expect(r.output).toContain('test is successful');
    expect(r.ok).toBe(true);
  });

  it.skipIf(!withCert)('the replicas load balancer passes `nginx -t`', () => {
    const r = nginxTest('lb', loadBalancer({ shim: '127.0.0.1:9991' }));
    expect(r.output).toContain('test is successful');
    expect(r.ok).toBe(true);
  });

  it.skipIf(!withCert)(
    "the replicas load balancer: over TLS a request reaches a replica with X-Forwarded-Proto https and the balancer's own X-Forwarded-Host; plain HTTP redirects, except its health path",
    async () => {
      // The "replica": answers which forwarding headers it got.
      const shim = http.createServer((req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ by: 'shim', headers: req.headers }));
      });
      await new Promise<void>((r) => shim.listen(0, '127.0.0.1', r));
      const shimPort = (shim.address() as net.AddressInfo).port;
      const tlsPort = await systemPort();
      const plainPort = await systemPort();
      const conf = join(dir, 'conf', 'lb-live.conf');
      writeFileSync(
        conf,
        `daemon off;\nmaster_process off;\npid ${join(dir, 'lb-live.pid')};\nevents {}\nhttp {\n    access_log off;\n${localPaths()}\n${loadBalancer(
          {
            shim: `127.0.0.1:${shimPort}`,
            tlsListen: `127.0.0.1:${tlsPort}`,
            plainListen: `127.0.0.1:${plainPort}`,
          },
        )}\n}\n`,
      );
      const nginx = spawn('nginx', ['-p', dir, '-c', conf, '-e', 'stderr'], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      nginx.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      try {
        await waitForPort(tlsPort, () => stderr);
        await waitForPort(plainPort, () => stderr);
        const ca = (cert as { cert: Buffer }).cert;

        // A client claiming http and another realm's host gets neither passed on.
        const seen = await answer(
          tlsPort,
          'GET',
          '/api/v1/users/me',
          {
            host: 'chat.example.com',
            'x-forwarded-for': '203.0.113.7',
            'x-forwarded-proto': 'http',
            'x-forwarded-host': 'other-realm.example.net',
          },
          ca,
        );
        const { by, headers } = JSON.parse(seen.body) as { by: string; headers: Record<string, string> };
        expect(by).toBe('shim');
        expect(headers['x-forwarded-proto']).toBe('https');
        expect(headers['x-forwarded-host']).toBe('chat.example.com');
        expect(headers.host).toBe('chat.example.com');
        expect(headers['x-forwarded-for']).toBe('203.0.113.7, 127.0.0.1');
        expect(headers['x-real-ip']).toBe('127.0.0.1');

        // A POST over TLS arrives with its body.
        const posted = await answer(
          tlsPort,
          'POST',
          '/json/users/me/presence',
          { host: 'chat.example.com', 'content-length': '13' },
          ca,
          'status=active',
        );
        expect((JSON.parse(posted.body) as { headers: Record<string, string> }).headers['x-forwarded-proto']).toBe('https');

        // The replicas' /metrics are not the internet's; the balancer's health path answers itself.
        expect((await answer(tlsPort, 'GET', '/metrics', { host: 'chat.example.com' }, ca)).status).toBe(404);
        expect((await answer(tlsPort, 'GET', '/lb-healthz', { host: 'chat.example.com' }, ca)).body).toBe('ok\n');

        // Plain HTTP: the health path (the container's healthcheck), a redirect for the rest.
        const health = await answer(plainPort, 'GET', '/lb-healthz', { host: 'chat.example.com' });
        expect({ status: health.status, body: health.body }).toEqual({ status: 200, body: 'ok\n' });
        for (const [method, path] of [
          ['GET', '/'],
          ['POST', '/json/users/me/presence?x=1'],
          ['GET', '/api/v1/users/me'],
        ] as const) {
          const r = await answer(plainPort, method, path, { host: 'chat.example.com' });
          expect({ method, path, status: r.status, location: r.headers.location, by: r.body.includes('"shim"') }).toEqual({
            method,
            path,
            status: 308,
            location: `https://chat.example.com${path}`,
            by: false,
          });
        }
      } finally {
        nginx.kill('SIGTERM');
        await new Promise((r) => nginx.once('close', r));
        shim.close();
      }
    },
  );

  it("topology (b): exactly the intercepted endpoints reach the shim, /api/ ones with Zulip's CORS headers; /api/v1/users/me/… subpaths stay with Zulip", async () => {
    // The "shim": answers who it is and which forwarding headers it got.
    const shim = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ by: 'shim', headers: req.headers }));
    });
    await new Promise<void>((r) => shim.listen(0, '127.0.0.1', r));
    const shimPort = (shim.address() as net.AddressInfo).port;
    const port = await systemPort();
    const snippetUpstream = readFileSync(join(DEPLOY, 'nginx-zulip-shim-upstream.conf'), 'utf8')
      .replace('server 127.0.0.1:9991;', `server 127.0.0.1:${shimPort};`)
      .replace('listen 127.0.0.1:9992;', `listen 127.0.0.1:${await systemPort()};`);
    // Zulip's own locations, answering "zulip" instead of going to Django or Tornado.
    const { nginx, stderr } = zulipNginx('live', port, snippetUpstream, ['/api/', '/json/', '/']);
    try {
      await waitForPort(port, stderr);
      const who = async (method: string, path: string) => {
        const text = await send(port, method, path, { host: 'chat.example.com' });
        return text.startsWith('{') ? (JSON.parse(text) as { by: string }).by : text;
      };
      const toShim: Array<[string, string]> = [
        ['POST', '/api/v1/users/me/presence'],
        ['POST', '/json/users/me/presence'],
        ['GET', '/api/v1/users/me'],
        ['POST', '/api/v1/register'],
        ['POST', '/json/register'],
        ['GET', '/api/v1/server_settings'],
        ['GET', '/api/v1/users/me?include_subscribers=false'],
        ['GET', '/api/v1/users'],
        ['GET', '/api/v1/users/12'],
        ['GET', '/api/v1/users/iago@zulip.com'],
        ['GET', '/json/users'],
        ['GET', '/json/users/me'],
        ['GET', '/json/users/12'],
      ];
      for (const [method, path] of toShim) expect(`${method} ${path} → ${await who(method, path)}`).toBe(`${method} ${path} → shim`);
      const toZulip: Array<[string, string]> = [
        ['GET', '/api/v1/users/me/subscriptions'],
        ['GET', '/api/v1/users/me/status'],
        ['GET', '/api/v1/users/me/presence/extra'],
        ['GET', '/api/v1/users/me/'],
        ['GET', '/api/v1/users/12/status'],
        ['GET', '/json/users/me/subscriptions'],
        ['GET', '/api/v1/events'],
        ['GET', '/json/server_settings'],
        ['POST', '/api/v1/messages'],
        ['GET', '/'],
      ];
      for (const [method, path] of toZulip) expect(`${method} ${path} → ${await who(method, path)}`).toBe(`${method} ${path} → zulip`);

      // A browser app on another origin gets Zulip's CORS headers from these endpoints too.
      for (const [method, path] of toShim) {
        const cors = await answer(port, method, path, { host: 'chat.example.com', origin: 'https://app.example.net' });
        const expected = path.startsWith('/api/')
          ? {
              'access-control-allow-origin': '*',
              'access-control-allow-headers': 'Authorization',
              'access-control-allow-methods': 'GET, POST, DELETE, PUT, PATCH, HEAD',
            }
          : {};
        const got = Object.fromEntries(Object.entries(cors.headers).filter(([k]) => k.startsWith('access-control-')));
        expect({ path, cors: got }).toEqual({ path, cors: expected });
      }

      const seen = await send(port, 'GET', '/api/v1/users/me', { host: 'chat.example.com', 'x-forwarded-for': '203.0.113.7' });
      const { headers } = JSON.parse(seen) as { headers: Record<string, string> };
      expect(headers.host).toBe('chat.example.com');
      expect(headers['x-forwarded-for']).toBe('203.0.113.7, 127.0.0.1');
      expect(headers['x-forwarded-proto']).toBe('http');
      expect(headers['x-real-ip']).toBe('127.0.0.1');
    } finally {
      nginx.kill('SIGTERM');
      await new Promise((r) => nginx.once('close', r));
      shim.close();
    }
  });

  it("several replicas on one host: docs/deployment.md's upstream block takes the intercepted endpoints to each replica in turn, and past one that is down", async () => {
    // The "replicas": each answers its own name.
    const replicas = await Promise.all(
      ['a', 'b'].map(async (name) => {
        const server = http.createServer((req, res) => {
          req.resume();
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ by: `replica ${name}` }));
        });
        await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
        return { name, server, port: (server.address() as net.AddressInfo).port };
      }),
    );
    const documented = replicasUpstreamBlock();
    const documentedPorts = [...documented.matchAll(/server 127\.0\.0\.1:(\d+);/g)].map((m) => m[1]!);
    expect(documentedPorts).toHaveLength(replicas.length);
    const block = documentedPorts.reduce((b, p, i) => b.replace(`127.0.0.1:${p};`, `127.0.0.1:${replicas[i]!.port};`), documented);
    // The shipped http-context file, its one-shim upstream replaced by the documented block.
    const shipped = readFileSync(join(DEPLOY, 'nginx-zulip-shim-upstream.conf'), 'utf8');
    expect(shipped).toMatch(/upstream zulip_compat_shim \{[^}]*\}/);
    const upstreamConf = shipped
      .replace(/upstream zulip_compat_shim \{[^}]*\}/, block)
      .replace('listen 127.0.0.1:9992;', `listen 127.0.0.1:${await systemPort()};`);
    const port = await systemPort();
    const { nginx, stderr } = zulipNginx('replicas', port, upstreamConf, ['/']);
    const who = async (method: string, path: string) => {
      const text = await send(port, method, path, { host: 'chat.example.com', 'content-type': 'application/x-www-form-urlencoded' });
      return text.startsWith('{') ? (JSON.parse(text) as { by: string }).by : text;
    };
    try {
      await waitForPort(port, stderr);
      const seen: string[] = [];
      for (let i = 0; i < 6; i++) seen.push(await who(i % 2 ? 'POST' : 'GET', i % 2 ? '/api/v1/users/me/presence' : '/api/v1/users/me'));
      // Round robin: each replica in turn, whatever the endpoint.
      expect(seen.filter((b) => b === 'replica a')).toHaveLength(3);
      expect(seen.filter((b) => b === 'replica b')).toHaveLength(3);
      expect(await who('GET', '/api/v1/users/me/subscriptions')).toBe('zulip');
      // Replica a stops: every request is answered by b.
      replicas[0]!.server.closeAllConnections();
      await new Promise((r) => replicas[0]!.server.close(r));
      for (let i = 0; i < 4; i++) expect(await who('GET', '/api/v1/users/me')).toBe('replica b');
    } finally {
      nginx.kill('SIGTERM');
      await new Promise((r) => nginx.once('close', r));
      for (const r of replicas) r.server.close();
    }
  });
});

/** The `upstream zulip_compat_shim` block docs/deployment.md shows under "Several replicas on one host". */
function replicasUpstreamBlock(): string {
  const doc = readFileSync(resolve(import.meta.dirname, '..', 'docs', 'deployment.md'), 'utf8');
  const section = doc.slice(doc.indexOf('## Several replicas on one host'));
  const block = /```nginx\n(upstream zulip_compat_shim \{[\s\S]*?\})\n```/.exec(section.slice(0, section.indexOf('\n## ', 5)));
  expect(block, 'an nginx upstream block in "Several replicas on one host"').not.toBeNull();
  return block![1]!;
}

/**
 * deploy/nginx-lb.conf as it runs here: the replicas' names replaced by `shim`, the certificate
 * directory by the one made for the test, and (for a live run) its listeners moved to free ports.
 */
function loadBalancer(o: { shim: string; tlsListen?: string; plainListen?: string }): string {
  let lb = readFileSync(join(DEPLOY, 'nginx-lb.conf'), 'utf8')
    .replace(/shim-[ab]:9991/g, o.shim)
    .replaceAll('/etc/nginx/certs/', `${join(dir, 'certs')}/`);
  expect(lb).toContain('listen 8443 ssl;');
  expect(lb).toContain('listen 8080;');
  if (o.tlsListen) lb = lb.replace('listen 8443 ssl;', `listen ${o.tlsListen} ssl;`);
  if (o.plainListen) lb = lb.replace('listen 8080;', `listen ${o.plainListen};`);
  // `resolve` in an upstream server is open-source nginx 1.27.3+; the image uses 1.27.
  if (!atLeast(1, 27, 3)) lb = lb.replace(/ resolve;/g, ';');
  return lb;
}

/** One request with exactly these headers (fetch may not set Host). */
async function send(port: number, method: string, path: string, headers: Record<string, string>): Promise<string> {
  return (await answer(port, method, path, headers)).body;
}

/** One request; over TLS, verified against `ca`, when it is given. */
function answer(
  port: number,
  method: string,
  path: string,
  headers: Record<string, string>,
  ca?: Buffer,
  body?: string,
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const options = { host: '127.0.0.1', port, method, path, headers, agent: false as const };
    const onAnswer = (res: http.IncomingMessage) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
      res.on('error', reject);
    };
    // The certificate is for 127.0.0.1, where the request goes; its Host header names a realm.
    const checkServerIdentity = (_host: string, c: tls.PeerCertificate) => tls.checkServerIdentity('127.0.0.1', c);
    const req = ca ? https.request({ ...options, ca, checkServerIdentity }, onAnswer) : http.request(options, onAnswer);
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * nginx on `port` in front of a stand-in Zulip whose `locations` answer "zulip", with the shim's
 * http-context file as `upstreamConf` says it and the shim's location blocks included: how an
 * operator's Zulip nginx looks with the shim beside it (topology (b)).
 */
function zulipNginx(name: string, port: number, upstreamConf: string, locations: string[]): { nginx: ChildProcess; stderr: () => string } {
  const upstreamFile = join(dir, 'conf', `${name}-upstream.conf`);
  writeFileSync(upstreamFile, upstreamConf);
  const conf = join(dir, 'conf', `${name}.conf`);
  writeFileSync(
    conf,
    `daemon off;\nmaster_process off;\npid ${join(dir, `${name}.pid`)};\nevents {}\nhttp {\n    access_log off;\n${localPaths()}
    upstream django { server unix:${join(dir, 'uwsgi-socket')}; }
    upstream tornado { server 127.0.0.1:9800; }
    include ${upstreamFile};
    server {
        listen 127.0.0.1:${port};
${locations.map((l) => `        location ${l} { return 200 'zulip'; }`).join('\n')}
        include ${shimSnippet()};
    }
}\n`,
  );
  const nginx = spawn('nginx', ['-p', dir, '-c', conf, '-e', 'stderr'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  nginx.stderr.on('data', (d: Buffer) => (log += d.toString()));
  return { nginx, stderr: () => log };
}

async function waitForPort(port: number, log: () => string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const up = await new Promise<boolean>((r) => {
      const c = net.connect(port, '127.0.0.1', () => {
        c.destroy();
        r(true);
      });
      c.on('error', () => r(false));
    });
    if (up) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`nginx did not start: ${log()}`);
}
