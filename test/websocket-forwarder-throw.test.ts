import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, expect, it, vi } from 'vitest';
import { capturedLog } from './support/captured-log.js';
import { webSocketForwarder } from '../src/proxy/websocket.js';
import { rawUpgrade } from './support/http-client.js';

// An http-proxy-3 whose ws() throws, as a library bug or an odd request could make it.
vi.mock('http-proxy-3', () => ({
  createProxyServer: () => ({
    on() {},
    close() {},
    ws() {
      throw new Error('thrown inside ws()');
    },
  }),
}));

const servers: http.Server[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

it('a throw inside the library closes that connection with the warning, and the next upgrade is served the same (E4)', async () => {
  const { lines, log } = capturedLog('warn');
  const forwarder = webSocketForwarder({ target: 'http://127.0.0.1:1', insecureTls: false, log, failure: 'upgrade failed' });
  const server = http.createServer((_req, res) => res.writeHead(404).end());
  server.on('upgrade', (req, socket, head) => forwarder.ws(req, socket, head));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  servers.push(server);
  const port = (server.address() as AddressInfo).port;
  for (let i = 0; i < 2; i++) expect(await rawUpgrade(port, { after: 'frame' })).toBe('');
  const warnings = lines.filter((l) => l.includes('"msg":"upgrade failed"') && l.includes('thrown inside ws()'));
  expect(warnings).toHaveLength(2);
  await forwarder.close();
});
