import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';
import { Pool } from 'undici';
import { BENCH_DIR, ROOT, scriptArgs, spawnChild, useBuiltChildren, type Child } from './children.js';
import { closedLoop, lastUpdateIdOf, pacedClients, percentile, send, type Req, type Sample } from './load.js';
import { BARE_TARGET, measureB4, NGINX_TARGET, PRODUCTION_TARGET, SHIM_TARGET } from './b4.js';
import { formatProfile, summariseProfile } from './profile-summary.js';
import { renderCosts, renderMarkdown, renderNotes, renderTable, type Results, type Target } from './report.js';
import { basicAuth, PRESENCE_PATH, SMALL_BODY, SMALL_PATH, type Flavour, type UpstreamStats } from './synthetic-upstream.js';

/**
 * `npm run bench`: what the shim saves and what it costs, each figure against its
 * reference measured in the same run. The synthetic upstream and the shim run in child
 * processes; this process drives the load. See bench/RESULTS.md for the latest figures.
 */

// ---------------------------------------------------------------------------- options

// Runs of their own, each printing its figures against its targets:
// `npm run bench -- b4`: the pass-through against nginx with every variant (bench/passthrough.ts);
// `npm run bench -- b6`: B6 alone, `--arm` variants interleaved, `--runs N` (bench/b6.ts);
// `npm run bench -- b7`: the large-realm cost curve (bench/b7.ts);
// `npm run bench -- rebase`: a refresh's prepared merge rebased over reports against merged again (B7, issue 44);
// `npm run bench -- replicas`: one replica against two on one Redis (bench/replicas.ts);
// `npm run bench -- flood`: memory under a flood of hosts with the default budgets (X2);
// `npm run bench -- flood-realms`: peak RSS under a flood of realms, a realm per Host (X2, X12);
// `npm run bench -- slow`: presence and profile latency beside slow uploads and idle connections (X11);
// `npm run bench -- long-polls`: more held long polls than descriptors allow (X11);
// `npm run bench -- drips`: pass-through beside uploads that drip their bodies and re-open (X11);
// `npm run bench -- slow-upload`: a 25 MB upload at 100 KB/s through the default configuration (X11);
// `npm run bench -- record-secrets`: recording requests that each carry a new secret (X2, X8);
// `npm run bench -- markdown-scan`: the prose scan of messages, 1 MB adversarial ones among them (M6);
// `npm run bench -- lockout`: real new realms during a flood of made-up ones (X12);
// `npm run bench -- forced-deltas`: other clients' deltas beside a caller sending made-up ids (X1);
// `npm run bench -- client-requests`: the client_requests_total hook alone, a pass-through's and a changed request's.
const OWN_RUNS: Record<string, string> = {
  b4: './passthrough.js',
  b6: './b6.js',
  b7: './b7.js',
  rebase: './rebase.js',
  replicas: './replicas.js',
  flood: './flood.js',
  'flood-realms': './flood-realms.js',
  slow: './slow-clients.js',
  'long-polls': './long-polls.js',
  drips: './drips.js',
  'slow-upload': './slow-upload.js',
  'record-secrets': './record-secrets.js',
  'markdown-scan': './markdown-scan.js',
  lockout: './realm-lockout.js',
  'forced-deltas': './forced-deltas.js',
  'client-requests': './client-requests.js',
};
// Every child (the shim, the upstream) runs as plain JavaScript, as the shim ships.
await useBuiltChildren();
const ownRun = OWN_RUNS[process.argv[2] ?? ''];
if (ownRun) {
  process.argv.splice(2, 1);
  await import(ownRun);
  process.exit(0);
}

const { values: flags } = parseArgs({
  options: {
    users: { type: 'string' },
    quick: { type: 'boolean' },
    'no-nginx': { type: 'boolean' },
    'no-install': { type: 'boolean' },
    out: { type: 'string' },
    clients: { type: 'string' },
    churn: { type: 'string' },
    'phase-seconds': { type: 'string' },
    rounds: { type: 'string' },
    'rss-polls': { type: 'string' },
    profile: { type: 'string' },
    'log-level': { type: 'string' },
    flavour: { type: 'string' },
  },
  strict: true,
});
const env = process.env;
const flagOrEnv = (f: string | undefined, e: string | undefined) => f ?? (e === '' ? undefined : e);
const bool = (f: boolean | undefined, e: string | undefined) => f === true || /^(1|true|yes)$/i.test(e ?? '');
const quick = bool(flags.quick, env.BENCH_QUICK);
const num = (v: string | undefined, fallback: number, name: string) => {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name}: expected a positive number, got ${JSON.stringify(v)}`);
  return n;
};

const opts = {
  quick,
  flavour: (flagOrEnv(flags.flavour, env.BENCH_FLAVOUR) ?? '2.1') as Flavour,
  users: Math.round(num(flagOrEnv(flags.users, env.BENCH_USERS), 10_000, '--users')),
  /** B2 simulated clients (1,000 in the issue; fewer by default in --quick). */
  clients: Math.round(num(flagOrEnv(flags.clients, env.BENCH_CLIENTS), quick ? 100 : 1_000, '--clients')),
  churn: num(flagOrEnv(flags.churn, env.BENCH_CHURN), 0.02, '--churn'),
  /** Length of each closed-loop phase (B3, B6, B4). */
  phaseSeconds: num(flagOrEnv(flags['phase-seconds'], env.BENCH_PHASE_SECONDS), quick ? 1 : 10, '--phase-seconds'),
  /** B4 runs each target this many times, alternating, and keeps the median of each figure. */
  rounds: Math.round(num(flagOrEnv(flags.rounds, env.BENCH_ROUNDS), quick ? 1 : 3, '--rounds')),
  nginx: !bool(flags['no-nginx'], env.BENCH_NO_NGINX),
  installNginx: !bool(flags['no-install'], env.BENCH_NO_INSTALL),
  out: resolve(flagOrEnv(flags.out, env.BENCH_OUT) ?? (quick ? join(BENCH_DIR, '.tmp') : BENCH_DIR)),
  profile: flagOrEnv(flags.profile, env.BENCH_PROFILE),
  logLevel: flagOrEnv(flags['log-level'], env.BENCH_LOG_LEVEL) ?? 'info',
  /** B2: real ms per simulated minute, and simulated minutes (the first one warms up). */
  minuteMs: quick ? 1_000 : 6_000,
  minutes: quick ? 3 : 4,
  /** Connections of the closed loops (B3, B6) and of the B4 load generator. */
  presenceConnections: 10,
  passthroughConnections: 50,
  /** B2 checked in real time (coalesceMs 5000, clients at their real rate) for this long; 0 = not. */
  b2RealSeconds: quick ? 0 : 30,
  /** B5: polls per RSS run. */
  rssPolls: Math.round(num(flagOrEnv(flags['rss-polls'], env.BENCH_RSS_POLLS), quick ? 1_000 : 3_000, '--rss-polls')),
  coalesceMs: 5_000,
};
if (opts.flavour !== '2.1' && opts.flavour !== '7.0') throw new Error('--flavour: 2.1 or 7.0');

const log = (s: string) => process.stdout.write(`${s}\n`);
const round = (v: number, d = 2) => Math.round(v * 10 ** d) / 10 ** d;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------- helpers

const form = { 'content-type': 'application/x-www-form-urlencoded' };

function presenceReq(
  caller: number,
  lastUpdateId: number | undefined,
  extra: Record<string, string> = {},
  status: 'active' | 'idle' = 'active',
): Req {
  const body = lastUpdateId === undefined ? `status=${status}` : `status=${status}&last_update_id=${lastUpdateId}`;
  return { method: 'POST', path: PRESENCE_PATH, headers: { ...form, authorization: basicAuth(caller), ...extra }, body };
}

async function once(url: string, r: Req) {
  const pool = new Pool(url, { connections: 1 });
  try {
    return await send(pool, r, true);
  } finally {
    await pool.close();
  }
}

/**
 * B1 beside its target's condition: the same clients each reporting `active`, so the churn is
 * the upstream's and the clients' own activity (P15). Mean delta bytes, and users a delta.
 */
async function activeClientsDeltas(url: string, initialId: number) {
  const minutes = 3;
  const polls = await pacedClients({
    url,
    clients: opts.clients,
    minuteMs: opts.minuteMs,
    minutes,
    connections: Math.min(opts.clients, 128),
    initialId,
    request: (c, id) => presenceReq(c, id),
    keepBody: (c, minute) => minute >= 1 && c % 20 === 0,
  });
  const steady = polls.filter((p) => p.minute >= 1 && p.status === 200 && p.sent > 0);
  const users = steady
    .filter((p) => p.body)
    .map((p) => Object.keys((JSON.parse(p.body!.toString()) as { presences?: object }).presences ?? {}).length);
  return {
    minutes,
    polls: steady.length,
    deltaBytes: round(mean(steady.map((p) => p.rawBytes)), 0),
    entriesPerDelta: round(mean(users), 0),
  };
}

/**
 * RESULTS.md: this run's part replaces the part before GENERATED_END; the longer studies after
 * it (each with its own command and date) are kept.
 */
const GENERATED_END = '<!-- End of the part npm run bench writes; the sections below are kept as they are. -->';
function writeResults(file: string, generated: string): void {
  const kept = existsSync(file) ? readFileSync(file, 'utf8').split(GENERATED_END)[1] : undefined;
  writeFileSync(file, `${generated}\n${GENERATED_END}${kept ?? '\n'}`);
  // In the project's Markdown style (aligned tables), so `npm run format:check` stays clean.
  spawnSync(process.execPath, [join(ROOT, 'node_modules', '@biomejs', 'biome', 'bin', 'biome'), 'format', '--write', file], {
    stdio: 'ignore',
  });
}

function startShim(upstreamUrl: string, coalesceMs: number, nodeArgs: string[] = [], logLevel = opts.logLevel): Promise<Child> {
  return spawnChild('shim-process.ts', [upstreamUrl, String(coalesceMs), logLevel], { nodeArgs });
}

interface Blocks {
  maxMs: number;
  p99Ms: number;
  maxGapMs: number;
  cpuInMaxGapMs: number;
  maxCpuInGapMs: number;
  gapOfMaxCpuMs: number;
  cpuSource?: string;
}

const profiles: Record<string, string> = {};
async function profiled<T>(shim: Child, name: string, run: () => Promise<T>): Promise<T> {
  if (!opts.profile) return run();
  await shim.call('profile-start');
  try {
    return await run();
  } finally {
    const file = resolve(opts.profile, `${name}.cpuprofile`);
    await shim.call('profile-stop', { file });
    profiles[name] = file;
  }
}

const gz = (b: Buffer) => gzipSync(b, { level: 6 }).length;
const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);

function commitOf(): string {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
    // The bench's own output files do not make the measured code another.
    const status = ['status', '--porcelain', '--untracked-files=no', '--', '.', ':!bench/RESULTS.md', ':!bench/results.json'];
    const dirty = execFileSync('git', status, { cwd: ROOT, encoding: 'utf8' }).trim() !== '';
    return dirty ? `${head} (working tree with uncommitted changes)` : head;
  } catch {
    return 'unknown';
  }
}

// ---------------------------------------------------------------------------- run

const started = performance.now();
const loadStart = os.loadavg();
log(`zulip-compat-shim bench: ${opts.users} users, synthetic ${opts.flavour} upstream, ${opts.quick ? 'quick' : 'full'} run`);
if (opts.profile) mkdirSync(opts.profile, { recursive: true });
mkdirSync(opts.out, { recursive: true });

const details: Record<string, unknown> = {};
const method: string[] = [];
const up = await spawnChild('upstream-process.ts', [opts.flavour, String(opts.users), String(opts.churn), '60000']);
const stats = () => up.call<UpstreamStats>('stats');

try {
  // -------------------------------------------------------------------------- B5 ledger
  log('B5 ledger memory …');
  // --single-threaded: with V8's background compiler, the figure moved between runs (124–219 B
  // a user seen on this machine under load) with the moment `merge` got optimised.
  const ledgerRun = spawnSync(
    process.execPath,
    ['--expose-gc', '--single-threaded', ...scriptArgs('ledger-memory.ts'), String(opts.users)],
    {
      cwd: ROOT,
      encoding: 'utf8',
    },
  );
  if (ledgerRun.status !== 0) throw new Error(`ledger-memory.ts failed: ${ledgerRun.stderr}`);
  const ledger = JSON.parse(ledgerRun.stdout.trim().split('\n').pop()!) as {
    bytesFirst: number;
    bytesSteady: number;
    bytesStore: number;
  };
  const ledgerBytes = Math.max(ledger.bytesFirst, ledger.bytesSteady);
  method.push(
    `B5 ledger: a child process with --expose-gc and --single-threaded (without it the figure moved from run to run with the moment V8's background compiler optimised the merge) builds a ${opts.users}-user observation, then measures heapUsed (after full GCs) before and after merging it into a new ledger and after a second merge with 2 % changed; the larger of the two deltas divided by the users (first ${ledger.bytesFirst} B, steady ${ledger.bytesSteady} B, through MemoryStore ${ledger.bytesStore} B).`,
  );

  // -------------------------------------------------------------------------- B1 + B2
  const coalesceScaled = Math.round((opts.coalesceMs * opts.minuteMs) / 60_000);
  log(`B1/B2 ${opts.clients} clients polling once per simulated minute (${opts.minuteMs} ms), coalesceMs ${coalesceScaled} …`);
  await up.call('clock', { minuteMs: opts.minuteMs });
  await up.call('churn', { on: true });
  const s1 = await startShim(up.url, coalesceScaled);
  // Clients that have polled before: each starts from the id of one earlier full poll, so the
  // first minute (not measured) is deltas too, as in a steady state.
  const prime1 = await once(s1.url, presenceReq(0, -1));
  const id1 = lastUpdateIdOf(prime1.tail);
  if (id1 === undefined || prime1.status !== 200) throw new Error(`priming poll failed: HTTP ${prime1.status}`);
  const measuredMinutes = opts.minutes - 1;
  const stride = Math.max(1, Math.floor((opts.clients * measuredMinutes) / 150));
  let before: UpstreamStats | undefined;
  let tSteady = 0;
  let upCpu = 0;
  let shimCpu = 0;
  const polls = await profiled(s1, 'b2-steady-polling', () =>
    pacedClients({
      url: s1.url,
      clients: opts.clients,
      minuteMs: opts.minuteMs,
      minutes: opts.minutes,
      connections: Math.min(opts.clients, 128),
      initialId: id1,
      // Real clients (browsers, the mobile app) send Accept-Encoding: gzip. They report `idle`:
      // B1's target is at 2 % churn, and a client reporting `active` changes its own user (P15),
      // which every other client's delta then carries (measured apart below).
      request: (c, id) => presenceReq(c, id, { 'accept-encoding': 'gzip' }, 'idle'),
      keepBody: (c, minute) => minute >= 1 && c % stride === 0,
      onMinute: async (minute) => {
        if (minute !== 1) return;
        [before] = await Promise.all([stats(), up.call<number>('cpu'), s1.call<number>('cpu')]);
        tSteady = performance.now();
      },
    }),
  );
  const [after, upCpuMs, shimCpuMs] = await Promise.all([stats(), up.call<number>('cpu'), s1.call<number>('cpu')]);
  upCpu = upCpuMs;
  shimCpu = shimCpuMs;
  const steadyMs = performance.now() - tSteady;
  await up.call('churn', { on: false });
  const steady = polls.filter((p) => p.minute >= 1 && p.status === 200 && p.sent > 0);
  const fullFetches = after.presenceFull - before!.presenceFull;
  const fetchesPerMin = fullFetches / measuredMinutes;
  // Identity: the JSON a client without gzip gets. Gzip: what the shim sent to clients that
  // accept it, or, if it did not compress, zlib over the bodies (a compressing front proxy).
  const shimCompresses = steady.some((p) => p.encoding === 'gzip');
  const deltaBytes = mean(steady.map((p) => p.rawBytes));
  const samples = steady.filter((p) => p.body);
  const deltaGzip = shimCompresses ? mean(steady.map((p) => p.bytes)) : mean(samples.map((p) => gz(p.body!)));
  const gzipHeader = { 'accept-encoding': 'gzip' };
  const fullModern = await once(s1.url, presenceReq(0, -1));
  const fullModernGz = await once(s1.url, presenceReq(0, -1, gzipHeader));
  const fullLegacy = await once(up.url, presenceReq(0, undefined, gzipHeader));
  const shimLegacy = await once(s1.url, presenceReq(0, undefined));
  const active = await activeClientsDeltas(s1.url, lastUpdateIdOf(fullModern.tail) ?? id1);
  await s1.stop();
  const wireGzip = (x: Sample) => (x.encoding === 'gzip' ? x.bytes : gz(x.body!));
  const steadyLatency = Float64Array.from(steady.map((p) => p.ms)).sort();
  const fullModernGzipBytes = wireGzip(fullModernGz);
  const fullLegacyGzipBytes = wireGzip(fullLegacy);
  details.b1 = {
    deltaBytes: round(deltaBytes, 0),
    deltaPolls: steady.length,
    deltaGzipBytes: round(deltaGzip, 0),
    deltaGzipFrom: shimCompresses ? 'shim answers (gzip above 1 KiB)' : `zlib level 6 over ${samples.length} sampled bodies`,
    fullModernBytes: fullModern.bytes,
    fullModernGzipBytes,
    fullModernGzipFrom: fullModernGz.encoding === 'gzip' ? 'shim answer' : 'zlib level 6',
    fullLegacyBytes: fullLegacy.bytes,
    fullLegacyGzipBytes,
    fullLegacyGzipFrom: fullLegacy.encoding === 'gzip' ? 'upstream answer' : 'zlib level 6 (the synthetic upstream does not compress)',
    shimLegacyBytes: shimLegacy.bytes,
    shimCompressesAnswers: shimCompresses,
    activeClients: { ...active, ratioFullModern: round(fullModern.bytes / active.deltaBytes) },
  };
  details.b2 = {
    clients: opts.clients,
    simulatedMinuteMs: opts.minuteMs,
    coalesceMs: coalesceScaled,
    measuredMinutes,
    fullFetches,
    pingsPerMinute: (after.presencePing - before!.presencePing) / measuredMinutes,
    usersListFetches: after.usersList,
    polls: polls.length,
    steadyPolls: steady.length,
    failedPolls: polls.filter((p) => p.status !== 200).length,
    skippedPolls: opts.clients * opts.minutes - polls.length,
    p50: round(percentile(steadyLatency, 50), 3),
    p99: round(percentile(steadyLatency, 99), 3),
    pollsPerSecond: (steady.length / steadyMs) * 1000,
    shimCpuMsPerPoll: shimCpu / Math.max(1, steady.length),
    shimCpuPct: (shimCpu / steadyMs) * 100,
    upstreamCpuPct: (upCpu / steadyMs) * 100,
  };
  method.push(
    `B1/B2: ${opts.clients} simulated clients each poll once per simulated minute at their own offset (spread evenly), with the presence_last_update_id of their previous answer, through a shim in its own process. Time is compressed: a simulated minute lasts ${opts.minuteMs} ms, the upstream's clock and churn (${opts.churn * 100} % of users per minute, in 10 steps) run at the same speed, and coalesceMs is scaled alike (${opts.coalesceMs} ms → ${coalesceScaled} ms). Every client starts from the id of one full poll made just before; the first minute warms up, the next ${measuredMinutes} are measured.`,
    `B1: bytes are response bodies. Delta = mean of the ${steady.length} steady-state polls; full modern = the shim's answer to last_update_id=-1 (what a modern server sends for a full poll); full legacy = the synthetic upstream's own answer to a plain poll (what an old client gets without the shim). Polls send Accept-Encoding: gzip; ${
      shimCompresses
        ? "the shim gzips its own answers above 1 KiB, so the gzip column is the bytes it sent (decoded for the identity column); the legacy reference is zlib level 6 over the upstream body, as Zulip's nginx would send it."
        : `the shim did not compress its presence answers, so the gzip column is what a compressing front proxy would send: zlib level 6 over the bodies (${samples.length} delta samples).`
    }`,
    `B1 with every client reporting active: the same ${opts.clients} clients for ${active.minutes} more simulated minutes (the first not measured), each reporting \`active\`: each report is its user's activity, which the shim records for every client (P15) as a modern server does, so every delta also carries the users of the other clients that reported since it last polled: ${active.entriesPerDelta} users a delta against ${round((opts.churn * opts.users) / 1, 0)} changed by the churn a minute; no target (the churn is no longer 2 %).`,
    `B2: full presence fetches counted by the upstream during the measured minutes; without the shim every poll is a full fetch (${opts.clients}/min). Each poll's own status report still reaches the upstream (ping_only, P9), shown as pings/min.`,
  );

  // -------------------------------------------------------------------------- B3, B6, B4
  log(`B3/B6 presence latency and event loop, ${opts.presenceConnections} connections, ${opts.phaseSeconds} s per phase …`);
  await up.call('clock', { minuteMs: 60_000 });
  await up.call('churn', { on: true });
  const s2 = await startShim(up.url, opts.coalesceMs);
  const prime = await once(s2.url, presenceReq(0, -1));
  const id0 = lastUpdateIdOf(prime.tail);
  if (id0 === undefined || prime.status !== 200) throw new Error(`priming poll failed: HTTP ${prime.status}`);
  const gzipHeader2 = { 'accept-encoding': 'gzip' };
  let realTime: { fetches: number; spanMs: number; perMinute: number; polls: number } | undefined;
  if (opts.b2RealSeconds > 0) {
    log(`B2 in real time: ${opts.clients} clients at one poll per minute each, coalesceMs ${opts.coalesceMs}, ${opts.b2RealSeconds} s …`);
    const mark = (await up.call<{ now: number }>('fetch-times')).now;
    const realPolls = await pacedClients({
      url: s2.url,
      clients: opts.clients,
      minuteMs: 60_000,
      minutes: 1,
      connections: Math.min(opts.clients, 128),
      initialId: id0,
      limitMs: opts.b2RealSeconds * 1000,
      request: (c, id) => presenceReq(c, id, gzipHeader2),
      keepBody: () => false,
    });
    const times = (await up.call<{ times: number[] }>('fetch-times')).times.filter((t) => t > mark);
    const spanMs = times.length > 1 ? times[times.length - 1]! - times[0]! : NaN;
    realTime = { fetches: times.length, spanMs, perMinute: (60_000 * (times.length - 1)) / spanMs, polls: realPolls.length };
    (details.b2 as Record<string, unknown>).realTime = realTime;
    method.push(
      `B2 in real time: time compression shortens the coalescing window but not the time a full fetch takes (reading, parsing and merging ${opts.users} users), which adds to every window; so B2 is also measured in real time on a fresh shim with coalesceMs ${opts.coalesceMs}: ${opts.clients} clients at their real rate (one poll per client per minute, spread) for ${opts.b2RealSeconds} s, the rate taken from the arrival times of the full fetches at the upstream (${realTime.fetches} fetches). This real-time rate is the headline figure.`,
    );
  }
  const phaseMs = opts.phaseSeconds * 1000;
  const warmMs = Math.min(2000, phaseMs / 2);
  const delta = (w: number) => presenceReq(w, id0);
  await closedLoop(s2.url, opts.presenceConnections, warmMs, delta);
  await s2.call('eld-start');
  const b3Shim = await profiled(s2, 'b3-delta-polls', () => closedLoop(s2.url, opts.presenceConnections, phaseMs, delta));
  const eldDelta = await s2.call<Blocks>('eld-stop');
  await closedLoop(up.url, opts.presenceConnections, warmMs, delta);
  const b3Direct = await closedLoop(up.url, opts.presenceConnections, phaseMs, delta);
  details.b3 = {
    users: opts.users,
    connections: opts.presenceConnections,
    shim: b3Shim,
    direct: b3Direct,
    shimRps: b3Shim.rps,
    directRps: b3Direct.rps,
    shimMeanBytes: b3Shim.meanBytes,
    directMeanBytes: b3Direct.meanBytes,
  };
  method.push(
    `B3: closed loop of ${opts.presenceConnections} connections for ${opts.phaseSeconds} s each (after a ${warmMs} ms warm-up), latencies timed per request to the last body byte (undici, this process). Shim: delta polls (the last_update_id of a full poll made just before; the upstream churns ${opts.churn * 100} %/min in real time, coalesceMs ${opts.coalesceMs}, so the phase includes its full upstream fetches). Direct: the same request to the upstream, which answers with its full snapshot (pre-serialised, so faster than a real Zulip server would be). No Accept-Encoding in either.`,
  );

  await s2.call('eld-start');
  const mixed = await profiled(s2, 'b6-mixed-polls', () =>
    closedLoop(s2.url, opts.presenceConnections, phaseMs, (w, n) => {
      const gzip = { 'accept-encoding': 'gzip' };
      return n % 10 < 8 ? presenceReq(w, id0, gzip) : n % 10 === 8 ? presenceReq(w, -1, gzip) : presenceReq(w, undefined, gzip);
    }),
  );
  const eldMixed = await s2.call<Blocks>('eld-stop');
  const maxBlock = Math.max(eldDelta.maxMs, eldMixed.maxMs);
  const maxBlockCpu = Math.max(eldDelta.maxCpuInGapMs, eldMixed.maxCpuInGapMs);
  details.b6 = {
    deltaOnlyMaxMs: round(eldDelta.maxMs),
    deltaOnlyEldP99Ms: round(eldDelta.p99Ms),
    mixedMaxMs: round(eldMixed.maxMs),
    mixedEldP99Ms: round(eldMixed.p99Ms),
    maxBlockCpuMs: round(maxBlockCpu),
    deltaOnly: eldDelta,
    mixedBlocks: eldMixed,
    mixedP50: mixed.p50,
    mixedP99: mixed.p99,
    mixedRps: mixed.rps,
    mixed,
  };
  method.push(
    `B6: perf_hooks.monitorEventLoopDelay (1 ms resolution) inside the shim process, during the B3 delta phase and during a mixed phase (each connection cycles 8 delta polls, 1 full modern poll, 1 legacy poll, all with Accept-Encoding: gzip; ${opts.phaseSeconds} s, ${opts.presenceConnections} connections); the figure is the larger maximum. The machine is shared, so a block in wall time includes time the shim waited for a core: a 1 ms timer in the shim also notes the CPU time its main thread used between two ticks (source: ${eldDelta.cpuSource ?? 'unknown'}), and the largest of those is given beside it.`,
  );

  // wrk takes whole seconds: a shorter --phase-seconds runs B4 for one.
  const b4Seconds = Math.max(1, Math.ceil(opts.phaseSeconds));
  log(`B4 pass-through ${SMALL_PATH}, ${opts.passthroughConnections} connections, ${b4Seconds} s × ${opts.rounds} rounds …`);
  await up.call('churn', { on: false });
  await s2.stop();
  const b4 = await measureB4({
    seconds: b4Seconds,
    rounds: opts.rounds,
    connections: opts.passthroughConnections,
    variants: !opts.quick,
    warmUp: !opts.quick,
    profileDir: opts.profile,
    nginx: opts.nginx,
    // A quick run (the test suite's smoke run among them) installs nothing.
    allowInstall: opts.installNginx && !opts.quick,
    log,
  });
  if (opts.profile) profiles['b4-passthrough'] = join(opts.profile, 'b4-shim.cpuprofile');
  details.b4 = {
    connections: opts.passthroughConnections,
    rounds: opts.rounds,
    rows: b4.rows,
    generator: b4.generator,
    nginx: b4.nginx,
    nginxSkipped: b4.nginxSkipped,
    table: b4.text,
  };
  method.push(
    `B4: ${b4.generator}, GET ${SMALL_PATH} (${SMALL_BODY.length} B of JSON) with Basic auth, ${opts.passthroughConnections} connections, ${b4Seconds} s per run, targets alternated over ${opts.rounds} round(s), the median of each figure kept. The shim's CLI runs as plain JavaScript (bundled from the current source, not through tsx), logging each request at level info (stdout to a file, as a production log collector would take it) with metrics on; each shim target's garbage collection during its runs is read from its own /metrics (nodejs_gc_duration_seconds) and given per 10,000 requests; nginx (${
      b4.nginx ?? 'skipped'
    }) runs worker_processes auto with an upstream keepalive pool and an access log; the production path is that nginx with deploy/nginx-zulip-shim.conf's location blocks included (the endpoints the shim changes go to the shim, this GET straight to the upstream); the bare undici pass-through (bench/bare-passthrough.ts) is a node:http server streaming every request through one undici Pool, with nothing else to do. \`npm run bench -- b4\` runs B4 alone, with the 1 MiB and long-poll variants.`,
  );

  // -------------------------------------------------------------------------- B5 RSS
  log(`B5 RSS with 1 and 1,000 callers, ${opts.rssPolls} polls each …`);
  const rss: Record<number, { rss: number; heapUsed: number; baseHeap: number; baseRss: number; run: unknown }> = {};
  for (const callers of [1, 1000]) {
    const s = await startShim(up.url, opts.coalesceMs, ['--expose-gc']);
    const base = await s.call<{ rss: number; heapUsed: number }>('memory', { gc: true });
    const p = await once(s.url, presenceReq(0, -1));
    const id = lastUpdateIdOf(p.tail)!;
    let k = 0;
    const run = await closedLoop(s.url, 20, 120_000, () => presenceReq(k++ % callers, id), opts.rssPolls);
    await sleep(100);
    const m = await s.call<{ rss: number; heapUsed: number }>('memory', { gc: true });
    rss[callers] = { rss: m.rss, heapUsed: m.heapUsed, baseHeap: base.heapUsed, baseRss: base.rss, run };
    await s.stop();
  }
  details.b5 = {
    users: opts.users,
    ledgerBytes,
    ledger,
    rss1: rss[1]!.rss,
    rss1000: rss[1000]!.rss,
    heap1: rss[1]!.heapUsed,
    heap1000: rss[1000]!.heapUsed,
    realmHeapBytes: rss[1]!.heapUsed - rss[1]!.baseHeap,
    runs: rss,
  };
  method.push(
    `B5 RSS: two fresh shim processes (--expose-gc), each primed with one full poll, then ${opts.rssPolls} delta polls over 20 connections, from 1 caller or from 1,000 distinct callers (distinct Basic credentials) of the same realm; RSS read after full GCs. Same work in both, only the callers differ.`,
  );

  // -------------------------------------------------------------------------- results
  const nginxBest = b4.small[NGINX_TARGET];
  const shimBest = b4.small[SHIM_TARGET]!;
  const directBest = b4.small.direct!;
  const bareBest = b4.small[BARE_TARGET];
  const productionBest = b4.small[PRODUCTION_TARGET];
  const r: Omit<Results, 'targets'> = {
    bandwidth_ratio_full_modern: round(fullModern.bytes / deltaBytes),
    bandwidth_ratio_full_legacy: round(fullLegacy.bytes / deltaBytes),
    upstream_fetch_reduction: round(opts.clients / (realTime?.perMinute ?? fetchesPerMin)),
    presence_p50_ms_shim: round(b3Shim.p50, 3),
    presence_p50_ms_direct: round(b3Direct.p50, 3),
    passthrough_rps_shim: round(shimBest.rps, 0),
    passthrough_rps_direct: round(directBest.rps, 0),
    passthrough_rps_nginx: nginxBest ? round(nginxBest.rps, 0) : null,
    ledger_bytes_per_user: round(ledgerBytes / opts.users, 1),
    rss_ratio_1000_vs_1_callers: round(rss[1000]!.rss / rss[1]!.rss, 3),
    max_event_loop_block_ms: round(maxBlock),
    bandwidth_ratio_full_modern_gzip: round((details.b1 as { fullModernGzipBytes: number }).fullModernGzipBytes / deltaGzip),
    bandwidth_ratio_full_legacy_gzip: round((details.b1 as { fullLegacyGzipBytes: number }).fullLegacyGzipBytes / deltaGzip),
    presence_p99_ms_shim: round(b3Shim.p99, 3),
    presence_p99_ms_direct: round(b3Direct.p99, 3),
    passthrough_p99_ms_shim: shimBest.p99,
    passthrough_p99_ms_direct: directBest.p99,
    passthrough_p99_ms_nginx: nginxBest ? nginxBest.p99 : null,
    passthrough_rps_bare_undici: bareBest ? round(bareBest.rps, 0) : null,
    passthrough_p99_ms_bare_undici: bareBest ? bareBest.p99 : null,
    passthrough_rps_production_path: productionBest ? round(productionBest.rps, 0) : null,
    passthrough_p99_ms_production_path: productionBest ? productionBest.p99 : null,
    upstream_full_fetches_per_min_shim: round(realTime?.perMinute ?? fetchesPerMin),
    upstream_full_fetches_per_min_shim_compressed: round(fetchesPerMin),
    upstream_full_fetches_per_min_shim_real_time: realTime ? round(realTime.perMinute) : null,
    upstream_fetch_reduction_compressed: round(opts.clients / fetchesPerMin),
    max_event_loop_block_cpu_ms: round(maxBlockCpu),
    upstream_full_fetches_per_min_direct: opts.clients,
    machine: {
      cpu: os.cpus()[0]?.model.trim() ?? 'unknown',
      cores: os.cpus().length,
      memoryGiB: round(os.totalmem() / 2 ** 30, 1),
      loadavgStart: loadStart.map((x) => round(x)),
      loadavgEnd: os.loadavg().map((x) => round(x)),
    },
    node: process.version,
    date: new Date().toISOString(),
    commit: commitOf(),
    options: { ...opts, out: relative(ROOT, opts.out) || '.' },
    details: { ...details, method, durationS: round((performance.now() - started) / 1000, 1) },
  };
  const target = (figure: string, goal: string, value: number | null, ok: boolean | null): Target => ({ figure, goal, value, met: ok });
  // B4: ≥ 0.85× the bare undici pass-through's req/s with p99 ≤ 2× nginx's; the production
  // path (nginx with the shim's locations) ≥ 0.95× nginx alone. Ratios of the same run.
  const v = b4.verdict;
  const results: Results = {
    ...r,
    targets: [
      target('B1', '≥ 25× fewer than full modern', r.bandwidth_ratio_full_modern, r.bandwidth_ratio_full_modern >= 25),
      // P9's bound: full fetches at least coalesceMs apart, so at most 60 s ÷ coalesceMs a minute
      // (12 at 5,000 ms: 83× fewer than 1,000 clients polling once a minute).
      target(
        'B2',
        `≤ ${round(60_000 / opts.coalesceMs)} a minute (one per coalesceMs, P9): ≥ ${Math.floor(opts.clients / (60_000 / opts.coalesceMs))}× fewer`,
        r.upstream_fetch_reduction,
        r.upstream_full_fetches_per_min_shim <= 60_000 / opts.coalesceMs,
      ),
      target('B3', 'shim p50 < direct p50', r.presence_p50_ms_shim, r.presence_p50_ms_shim < r.presence_p50_ms_direct),
      target('B4', '≥ 0.85× bare undici req/s, p99 ≤ 2× nginx', v.shimVsBare === null ? null : round(v.shimVsBare), v.passThroughMet),
      target(
        'B4 production path',
        '≥ 0.95× nginx req/s',
        v.productionVsNginx === null ? null : round(v.productionVsNginx),
        v.productionMet,
      ),
      target('B5 ledger', '≤ 200 B per user', r.ledger_bytes_per_user, r.ledger_bytes_per_user <= 200),
      target('B5 RSS', '≤ 1.1×', r.rss_ratio_1000_vs_1_callers, r.rss_ratio_1000_vs_1_callers <= 1.1),
      target('B6', '≤ 50 ms', r.max_event_loop_block_ms, r.max_event_loop_block_ms <= 50),
      target('B6 CPU', '≤ 50 ms', r.max_event_loop_block_cpu_ms, r.max_event_loop_block_cpu_ms <= 50),
    ],
  };

  log('');
  log(renderTable(results));
  log('');
  log(renderCosts(results));
  log(renderNotes(results));
  for (const [name, file] of Object.entries(profiles)) {
    log(`\nCPU profile of the shim, ${name} (${relative(ROOT, file)}):`);
    log(formatProfile(summariseProfile(file, 12)));
  }
  writeFileSync(join(opts.out, 'results.json'), `${JSON.stringify(results, null, 2)}\n`);
  const command = opts.quick
    ? 'npm run bench -- --quick'
    : opts.users === 10_000
      ? 'npm run bench'
      : `npm run bench -- --users ${opts.users}`;
  writeResults(join(opts.out, 'RESULTS.md'), renderMarkdown(results, command));
  log(`\nwrote ${relative(ROOT, join(opts.out, 'results.json'))} and RESULTS.md in ${round((performance.now() - started) / 1000, 1)} s`);
} finally {
  await up.stop();
}
