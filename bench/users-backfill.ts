import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { loadConfig } from '../src/config/index.js';
import { createLogger } from '../src/observability/logger.js';
import { createShim } from '../src/server.js';
import { legacyUserRow } from './legacy-user-row.js';

/**
 * V4 cost: a 2.1 realm of N users (default 10000) behind the shim; GET /api/v1/users and a
 * register with realm_user, each filled with every modern user field. Measures the time per
 * answer (client side, whole body read) and the longest event-loop block of the process while
 * the shim works (a 1 ms timer's longest gap; the upstream writes a prebuilt buffer and the
 * client only counts bytes, so the gap is the shim's).
 * Usage: node --import tsx bench/users-backfill.ts [--users N] [--rounds R]
 */

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const USERS = arg('users', 10_000);
const ROUNDS = arg('rounds', 10);

const members = Array.from({ length: USERS }, (_, i) => legacyUserRow(i + 1));
const usersBody = Buffer.from(JSON.stringify({ result: 'success', msg: '', members }));
const registerBody = Buffer.from(
  JSON.stringify({
    result: 'success',
    msg: '',
    queue_id: 'q',
    last_event_id: -1,
    realm_users: members.filter((m) => m.is_active),
    realm_non_active_users: members.filter((m) => !m.is_active),
    cross_realm_bots: [],
    user_id: 2,
    email: 'user2@chat.example.com',
    delivery_email: 'two@example.org',
    twenty_four_hour_time: true,
    enter_sends: false,
  }),
);
const settingsBody = Buffer.from(JSON.stringify({ result: 'success', msg: '', zulip_version: '2.1.7' }));

const upstream = http.createServer((req, res) => {
  req.resume();
  const path = (req.url ?? '').split('?')[0];
  const body = path === '/api/v1/users' ? usersBody : path === '/api/v1/register' ? registerBody : settingsBody;
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
  res.end(body);
});
await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;

const { config } = loadConfig(['--upstream', upstreamUrl, '--port', '0', '--log-level', 'silent'], {});
const shim = createShim({ config, log: createLogger('silent'), target: upstreamUrl, upstreamId: upstreamUrl });
const { url } = await shim.listen(0, '127.0.0.1');
const auth = { authorization: `Basic ${Buffer.from('user2@chat.example.com:key').toString('base64')}` };

/**
 * The longest gap between two ticks of a 1 ms timer while `work` runs, in wall time and in the
 * process's CPU time within that gap (on a shared machine the wall time also holds waits for a
 * core; the CPU time is what the shim itself ran).
 */
async function longestBlock<T>(work: () => Promise<T>): Promise<{ result: T; blockMs: number; blockCpuMs: number }> {
  let last = performance.now();
  let lastCpu = process.cpuUsage();
  let longest = 0;
  let longestCpu = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    const cpu = process.cpuUsage(lastCpu);
    longest = Math.max(longest, now - last);
    longestCpu = Math.max(longestCpu, (cpu.user + cpu.system) / 1000);
    last = now;
    lastCpu = process.cpuUsage();
  }, 1);
  try {
    const result = await work();
    return { result, blockMs: longest, blockCpuMs: longestCpu };
  } finally {
    clearInterval(timer);
  }
}

async function fetchBytes(
  path: string,
  method: 'GET' | 'POST',
  body?: string,
  base = url,
): Promise<{ ms: number; bytes: number; backfilled: string }> {
  const started = performance.now();
  const r = await request(`${base}${path}`, {
    method,
    headers: { ...auth, ...(body ? { 'content-type': 'application/x-www-form-urlencoded' } : {}) },
    body,
  });
  let bytes = 0;
  for await (const c of r.body) bytes += (c as Buffer).length;
  if (r.statusCode !== 200) throw new Error(`${path}: HTTP ${r.statusCode}`);
  return { ms: performance.now() - started, bytes, backfilled: String(r.headers['x-zulip-compat-backfilled'] ?? '') };
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

async function measure(name: string, call: () => Promise<{ ms: number; bytes: number; backfilled: string }>) {
  await call(); // warm: feature level, JIT
  const times: number[] = [];
  const blocks: number[] = [];
  const cpuBlocks: number[] = [];
  let last = { ms: 0, bytes: 0, backfilled: '' };
  for (let i = 0; i < ROUNDS; i++) {
    const { result, blockMs, blockCpuMs } = await longestBlock(call);
    times.push(result.ms);
    blocks.push(blockMs);
    cpuBlocks.push(blockCpuMs);
    last = result;
  }
  console.log(
    `${name}: ${USERS} users, upstream ${name.startsWith('GET') ? usersBody.length : registerBody.length} B → ${last.bytes} B; ` +
      `time p50 ${pct(times, 50).toFixed(1)} ms, max ${Math.max(...times).toFixed(1)} ms; ` +
      `longest event-loop block p50 ${pct(blocks, 50).toFixed(1)} ms, max ${Math.max(...blocks).toFixed(1)} ms ` +
      `(CPU in it p50 ${pct(cpuBlocks, 50).toFixed(1)} ms, max ${Math.max(...cpuBlocks).toFixed(1)} ms); added: ${last.backfilled}`,
  );
}

console.log(
  `Node ${process.version}, ${ROUNDS} rounds each, load average ${(await import('node:os'))
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' / ')}`,
);
await measure('GET /api/v1/users straight from the upstream (reference)', () => fetchBytes('/api/v1/users', 'GET', undefined, upstreamUrl));
await measure('GET /api/v1/users', () => fetchBytes('/api/v1/users', 'GET'));
await measure('POST /api/v1/register (realm_user)', () =>
  fetchBytes('/api/v1/register', 'POST', 'event_types=%5B%22realm_user%22%5D&fetch_event_types=%5B%22realm_user%22%5D'),
);
await shim.close();
upstream.close();
