import net from 'node:net';
import { parseArgs } from 'node:util';
import { spawnChild } from './children.js';
import { basicAuth, UPLOAD_PATH } from './synthetic-upstream.js';

/**
 * X11's legitimate slow upload: `npm run bench -- slow-upload [--mb 25] [--kbps 100]`. One
 * client uploads `mb` megabytes (10^6 bytes) at `kbps` kilobytes (10^3 bytes) a second, evenly
 * paced (a tenth of a second's bytes every 100 ms), through a shim with the default
 * configuration to a synthetic upstream that answers with the bytes it received. Does the
 * upload finish, or is it cut by a body deadline? The shim and the upstream run in child
 * processes.
 */

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== 'slow-upload'),
  options: { mb: { type: 'string' }, kbps: { type: 'string' } },
  strict: true,
});
const bytes = Math.round(Number(values.mb ?? 25) * 1e6);
const rate = Number(values.kbps ?? 100) * 1e3;

const upstream = await spawnChild('upstream-process.ts', ['2.1', '200', '0', '60000']);
const shim = await spawnChild('shim-process.ts', [upstream.url, '5000', 'warn']);
const port = Number(new URL(shim.url).port);

/** Sends the upload at the rate; resolves with the answer (or what there was when the connection closed) and the seconds taken. */
function upload(): Promise<{ answer: string; sent: number; seconds: number }> {
  return new Promise((resolve) => {
    const started = performance.now();
    const s = net.connect(port, '127.0.0.1');
    let sent = 0;
    let answer = '';
    const chunk = Buffer.alloc(Math.ceil(rate / 10), 0x61);
    const timer = setInterval(() => {
      // The bytes due by now at the rate: timers drift, the average does not.
      const due = Math.min(bytes, Math.floor(((performance.now() - started) / 1000) * rate));
      if (due > sent) {
        const n = Math.min(due - sent, chunk.length * 4);
        s.write(chunk.length >= n ? chunk.subarray(0, n) : Buffer.alloc(n, 0x61));
        sent += n;
      }
      if (sent >= bytes) clearInterval(timer);
    }, 100);
    s.write(
      `POST ${UPLOAD_PATH} HTTP/1.1\r\nHost: bench.test\r\nAuthorization: ${basicAuth(1)}\r\n` +
        `Content-Type: application/octet-stream\r\nContent-Length: ${bytes}\r\nConnection: close\r\n\r\n`,
    );
    s.on('data', (d) => {
      answer += String(d);
    });
    s.on('error', () => {});
    s.on('close', () => {
      clearInterval(timer);
      resolve({ answer, sent, seconds: (performance.now() - started) / 1000 });
    });
  });
}

const r = await upload();
await shim.stop();
await upstream.stop();
const status = r.answer.slice(0, r.answer.indexOf('\r\n')) || 'no answer';
const received = /"bytes":(\d+)/.exec(r.answer)?.[1];
process.stdout.write(
  `X11 slow upload: ${(bytes / 1e6).toFixed(1)} MB at ${(rate / 1e3).toFixed(0)} KB/s through the default configuration\n` +
    `answer: ${status}${received ? `, the upstream received ${received} bytes` : ''}; ${r.sent} bytes sent in ${r.seconds.toFixed(1)} s\n` +
    `target: the upload finishes: ${received === String(bytes) ? 'met' : 'NOT met'}\n`,
);
