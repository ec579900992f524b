import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { serveParent } from './children.js';
import { SMALL_BODY, SMALL_PATH } from './synthetic-upstream.js';

/**
 * The upstream of bench/passthrough.ts, in a process of its own: the small JSON GET (B4), a
 * 1 MiB answer, a 1 MiB upload it counts and acknowledges, and a long poll that answers after
 * `?ms=` (GET /api/v1/events).
 */

const small = Buffer.from(SMALL_BODY);
const mib = Buffer.alloc(1024 * 1024, 120);
const ok = Buffer.from('{"result":"success","msg":""}');
const heartbeat = Buffer.from('{"result":"success","msg":"","events":[{"type":"heartbeat","id":0}]}');

const server = http.createServer((req, res) => {
  const [path = '/', query = ''] = (req.url ?? '/').split('?');
  if (req.method === 'POST' && path === '/bench/upload') {
    req.on('data', () => {});
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json', 'content-length': ok.length }).end(ok));
    return;
  }
  req.resume();
  if (path === SMALL_PATH) {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': small.length }).end(small);
  } else if (path === '/bench/1mib') {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': mib.length }).end(mib);
  } else if (path === '/api/v1/events') {
    const ms = Number(new URLSearchParams(query).get('ms') ?? 1000);
    const t = setTimeout(
      () => res.writeHead(200, { 'content-type': 'application/json', 'content-length': heartbeat.length }).end(heartbeat),
      ms,
    );
    res.on('close', () => clearTimeout(t));
  } else {
    res.writeHead(404).end();
  }
});
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => {
  serveParent(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {}, async () => {
    server.closeAllConnections();
    server.close();
  });
});
