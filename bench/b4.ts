import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { shippedCli, spawnChild, startCli, type Child } from './children.js';
import { findNginx, findProgram, startNginx, type NginxFound } from './nginx.js';
import { formatProfile, summariseProfile } from './profile-summary.js';
import { cannon, gcOf, median } from './load.js';
import { basicAuth, SMALL_PATH } from './synthetic-upstream.js';

/**
 * B4: the pass-through against its references in the same run, side by side, with wrk as the
 * load generator (a C program: it takes less of the shared cores than a Node one would). Used
 * by `npm run bench` and, on its own, by bench/passthrough.ts.
 *
 * Targets: the upstream directly; nginx (`worker_processes auto`, upstream keepalive pool, an
 * access log); the production path, the same nginx with deploy/nginx-zulip-shim.conf's location
 * blocks included (the endpoints the shim changes go to the shim, everything else straight to
 * the upstream: what a passed-through request meets in topology b); the bare undici pass-through
 * (bench/bare-passthrough.ts: a node:http server streaming every request through an undici
 * Pool, nothing else); and the shim's CLI as plain JavaScript (children.ts, useBuiltChildren)
 * at log level info (stdout to a file), metrics on; with `before`, the built CLI of another
 * checkout (its `dist/cli.js`) in the same run.
 * Each target runs in turn, `rounds` times; each figure is the median of its rounds (the
 * machine's speed drifts during a run: alternating targets and taking the middle run compares
 * them on the same footing). Variants (unless `variants` is false): a 1 MiB answer, a 1 MiB
 * upload, and long polls (GET /api/v1/events held 200 ms by the upstream, 200 connections), so
 * a gain on the small GET is not paid for on the streaming paths.
 *
 * Each shim target's garbage collection during a run (its /metrics) is reported
 * per 10,000 requests: what a request leaves behind shows there first (src/http/in-flight.ts).
 *
 * Targets on the small GET: the shim ≥ 0.85× the bare undici pass-through's req/s, its p99
 * ≤ 2× nginx's; the production path ≥ 0.95× nginx's req/s.
 */

export interface B4Options {
  seconds: number;
  rounds: number;
  connections: number;
  variants: boolean;
  /** Where the shim's CPU profile of the first small-GET round goes. */
  profileDir?: string | undefined;
  /** A checkout of an older commit, measured in the same run. */
  before?: string | undefined;
  /** Run nginx as the reference (else only the upstream directly)? */
  nginx: boolean;
  /** A 1 s run of every target before the measured rounds (default true). */
  warmUp?: boolean;
  /** May nginx and wrk be installed with apt-get when missing? */
  allowInstall: boolean;
  log: (line: string) => void;
}

export interface WrkResult {
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

function wrk(
  bin: string,
  url: string,
  o: { connections: number; seconds: number; script?: string; headers?: Record<string, string> },
): WrkResult {
  const args = ['-t2', `-c${o.connections}`, `-d${o.seconds}s`, '--latency', '--timeout', '10s'];
  for (const [k, v] of Object.entries(o.headers ?? {})) args.push('-H', `${k}: ${v}`);
  if (o.script) args.push('-s', o.script);
  args.push(url);
  const r = spawnSync(bin, args, { encoding: 'utf8' });
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

/**
 * `gcMsPer10k`: for a shim target, the garbage collection its processes did during the run (its
 * own `/metrics`, `nodejs_gc_duration_seconds`, every kind), in ms per 10,000 requests.
 */
export type Row = { variant: string; target: string; gcMsPer10k?: number; onCpu?: number; runQueue?: number } & WrkResult;

/**
 * A process's main thread as Linux's scheduler counts it (/proc/PID/schedstat): ns on a core,
 * ns runnable but waiting for one. Undefined where there is no such file.
 */
function schedOf(pid: number | undefined): { onCpuNs: number; waitNs: number } | undefined {
  if (pid === undefined) return undefined;
  try {
    const [onCpuNs, waitNs] = readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ').map(Number);
    return onCpuNs === undefined || waitNs === undefined ? undefined : { onCpuNs, waitNs };
  } catch {
    return undefined;
  }
}

export const NGINX_TARGET = 'nginx (worker_processes auto)';
/** nginx with the shim's location blocks: the passed-through requests of topology (b). */
export const PRODUCTION_TARGET = "production path: nginx with the shim's locations";
export const BARE_TARGET = 'bare undici pass-through';
export const SHIM_TARGET = 'shim';
/** Targets with no /metrics of their own (no GC figure). */
const NOT_A_SHIM = new Set(['direct', NGINX_TARGET, PRODUCTION_TARGET, BARE_TARGET]);

/** B4's targets, on the small GET: each ratio of the same run, and whether it is met. */
export interface B4Verdict {
  shimVsBare: number | null;
  shimVsNginx: number | null;
  shimP99VsNginx: number | null;
  /** The p99 target's margin: what the bare pass-through's own tail takes of it, and the shim's over the bare one's. */
  bareP99VsNginx: number | null;
  shimP99VsBare: number | null;
  productionVsNginx: number | null;
  /** shim ≥ 0.85× bare and p99 ≤ 2× nginx's (null: a reference was not measured). */
  passThroughMet: boolean | null;
  /** production path ≥ 0.95× nginx. */
  productionMet: boolean | null;
}

export function b4Verdict(small: Record<string, Row | undefined>): B4Verdict {
  const shim = small[SHIM_TARGET];
  const bare = small[BARE_TARGET];
  const nginx = small[NGINX_TARGET];
  const production = small[PRODUCTION_TARGET];
  const ratio = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? null : a / b);
  const shimVsBare = ratio(shim?.rps, bare?.rps);
  const shimP99VsNginx = ratio(shim?.p99, nginx?.p99);
  const productionVsNginx = ratio(production?.rps, nginx?.rps);
  return {
    shimVsBare,
    shimVsNginx: ratio(shim?.rps, nginx?.rps),
    shimP99VsNginx,
    bareP99VsNginx: ratio(bare?.p99, nginx?.p99),
    shimP99VsBare: ratio(shim?.p99, bare?.p99),
    productionVsNginx,
    passThroughMet: shimVsBare === null || shimP99VsNginx === null ? null : shimVsBare >= 0.85 && shimP99VsNginx <= 2,
    productionMet: productionVsNginx === null ? null : productionVsNginx >= 0.95,
  };
}

export interface B4Result {
  rows: Row[];
  /** Each target's median run on the small GET (req/s, p50 and p99 each the median of the rounds). */
  small: Record<string, Row | undefined>;
  nginx: string | null;
  /** Why nginx did not run, if it did not. */
  nginxSkipped: string | null;
  /** The load generator. */
  generator: string;
  verdict: B4Verdict;
  /** The report: how it was run, and a table. */
  text: string;
}

export async function measureB4(o: B4Options): Promise<B4Result> {
  // wrk where it is installed (or can be); else autocannon in this process, small GET only.
  const wrkBin = findProgram('wrk', o.allowInstall);
  const load = async (
    url: string,
    v: { connections: number; seconds: number; script?: string; headers: Record<string, string> },
  ): Promise<WrkResult> => {
    if (typeof wrkBin === 'string') return wrk(wrkBin, url, v);
    const r = await cannon(url, v.connections, v.seconds, v.headers);
    return { rps: r.rps, p50: r.p50, p99: r.p99, errors: r.errors, non2xx: r.non2xx };
  };
  const generator = typeof wrkBin === 'string' ? 'wrk -t2' : `autocannon in this process (${wrkBin.reason})`;
  const variantsToo = o.variants && typeof wrkBin === 'string';
  const dir = mkdtempSync(join(tmpdir(), 'zcs-bench-pt-'));
  const uploadScript = join(dir, 'upload.lua');
  writeFileSync(
    uploadScript,
    'wrk.method = "POST"\nwrk.body = string.rep("x", 1048576)\nwrk.headers["Content-Type"] = "application/octet-stream"\n',
  );
  const children: Child[] = [];
  const loadAtStart = loadavg();
  const up = await spawnChild('passthrough-upstream.ts', []);
  children.push(up);
  const nginx: NginxFound = o.nginx ? findNginx(o.allowInstall) : { reason: 'disabled for this run (--no-nginx)' };
  const ng = nginx.bin !== undefined ? await startNginx(nginx.bin, up.url, 'auto') : undefined;
  const bare = await spawnChild('bare-passthrough.ts', [up.url]);
  children.push(bare);
  const cli = shippedCli();
  const profileDir = o.profileDir && join(o.profileDir, 'b4-cpu-prof');
  // The profile (of every run of the one-process shim) is written when it exits.
  if (profileDir) rmSync(profileDir, { recursive: true, force: true });
  const shim = await startCli(cli, up.url, { dir, nodeArgs: profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [] });
  const shims = [shim];
  const production = nginx.bin !== undefined ? await startNginx(nginx.bin, up.url, 'auto', shim.url) : undefined;
  const targets: Array<[string, string]> = [['direct', up.url]];
  /** The Node targets' processes: how busy their one main thread is during a run. */
  const pids = new Map<string, number | undefined>([
    [BARE_TARGET, bare.proc.pid],
    [SHIM_TARGET, shim.pid],
  ]);
  if (ng) targets.push([NGINX_TARGET, ng.url]);
  if (production) targets.push([PRODUCTION_TARGET, production.url]);
  targets.push([BARE_TARGET, bare.url]);
  targets.push([SHIM_TARGET, shim.url]);
  if (o.before) {
    const beforeCli = join(o.before, 'dist', 'cli.js');
    if (!existsSync(beforeCli)) throw new Error(`--before ${o.before}: no dist/cli.js there (run npm run build in it first)`);
    const before = await startCli(beforeCli, up.url, { dir });
    shims.push(before);
    targets.push(['shim before', before.url]);
    pids.set('shim before', before.pid);
  }

  const rows: Row[] = [];
  /** A target's runs of a variant as one: the median of each figure over the rounds. */
  const typical = (variant: string, target: string): Row | undefined => {
    const runs = rows.filter((r) => r.variant === variant && r.target === target);
    if (runs.length === 0) return undefined;
    const of = (k: 'rps' | 'p50' | 'p99' | 'errors' | 'non2xx') => median(runs.map((r) => r[k]));
    // Figures only some targets have: the median of the runs that have them.
    const some = (k: 'gcMsPer10k' | 'onCpu' | 'runQueue') => {
      const had = runs.flatMap((r) => (r[k] === undefined ? [] : [r[k]]));
      return had.length ? { [k]: median(had) } : {};
    };
    return {
      variant,
      target,
      rps: of('rps'),
      p50: of('p50'),
      p99: of('p99'),
      errors: of('errors'),
      non2xx: of('non2xx'),
      ...some('gcMsPer10k'),
      ...some('onCpu'),
      ...some('runQueue'),
    };
  };
  const smallName = `small GET ${SMALL_PATH}`;
  try {
    const auth = { authorization: basicAuth(0) };
    const variants: Array<{ name: string; path: string; connections: number; script?: string; seconds: number }> = [
      { name: smallName, path: SMALL_PATH, connections: o.connections, seconds: o.seconds },
    ];
    if (variantsToo) {
      variants.push(
        { name: '1 MiB answer', path: '/bench/1mib', connections: 10, seconds: Math.max(3, o.seconds / 2) },
        { name: '1 MiB upload', path: '/bench/upload', connections: 10, script: uploadScript, seconds: Math.max(3, o.seconds / 2) },
        {
          name: 'long poll, 200 ms, 200 connections',
          path: '/api/v1/events?ms=200',
          connections: 200,
          seconds: Math.max(3, o.seconds / 2),
        },
      );
    }
    for (const v of variants) {
      if (o.warmUp !== false) {
        o.log(`${v.name}: warm-up …`);
        for (const [, url] of targets) await load(`${url}${v.path}`, { ...v, seconds: 1, headers: auth });
      }
      for (let r = 0; r < o.rounds; r++) {
        for (const [name, url] of targets) {
          // Every target but the references is a shim, with its own /metrics.
          const gcBefore = NOT_A_SHIM.has(name) ? undefined : (await gcOf(url)).seconds;
          const schedBefore = schedOf(pids.get(name));
          const res = await load(`${url}${v.path}`, { ...v, headers: auth });
          const schedAfter = schedOf(pids.get(name));
          const sched =
            schedBefore && schedAfter
              ? {
                  onCpu: (schedAfter.onCpuNs - schedBefore.onCpuNs) / (v.seconds * 1e9),
                  runQueue: (schedAfter.waitNs - schedBefore.waitNs) / (v.seconds * 1e9),
                }
              : {};
          const requests = res.rps * v.seconds;
          const gcMsPer10k =
            gcBefore === undefined || requests === 0 ? undefined : (((await gcOf(url)).seconds - gcBefore) * 1000 * 10_000) / requests;
          rows.push({ variant: v.name, target: name, ...res, ...sched, ...(gcMsPer10k === undefined ? {} : { gcMsPer10k }) });
          o.log(
            `  ${name}: ${res.rps.toFixed(0)} req/s, p50 ${res.p50} ms, p99 ${res.p99} ms${res.errors || res.non2xx ? `, ${res.errors} errors, ${res.non2xx} non-2xx` : ''}`,
          );
        }
      }
    }
  } finally {
    await ng?.stop();
    await production?.stop();
    for (const s of shims) await s.stop();
    for (const c of children.reverse()) await c.stop();
    rmSync(dir, { recursive: true, force: true });
  }

  const out: string[] = [];
  out.push(
    `- Date: ${new Date().toISOString()}; load average at start ${loadAtStart.map((l) => l.toFixed(2)).join(' / ')}, at end ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' / ')}`,
  );
  out.push(
    `- ${generator}, ${o.rounds} round(s) alternating targets, the median of each figure kept; the shim's CLI as plain JavaScript (bundled from the current source, not run through tsx); nginx: ${ng ? `${nginx.bin !== undefined ? nginx.version : ''}, worker_processes auto, keepalive 64, access log; the production path is the same nginx with deploy/nginx-zulip-shim.conf included and its zulip_compat_shim upstream (keepalive 32) the shim measured here` : `not run (${nginx.bin === undefined ? nginx.reason : ''})`}; the bare undici pass-through: bench/bare-passthrough.ts, one undici Pool of 256 connections`,
  );
  const small = Object.fromEntries(targets.map(([name]) => [name, typical(smallName, name)]));
  const verdict = b4Verdict(small);
  // Each round's shim ÷ bare, the two run one after the other: how far the machine moved the
  // figure within this run (a spread wider than the target's margin says the run cannot decide it).
  const ofRounds = (target: string) => rows.filter((r) => r.variant === smallName && r.target === target).map((r) => r.rps);
  const bareRounds = ofRounds(BARE_TARGET);
  const perRound = ofRounds(SHIM_TARGET).flatMap((rps, i) => (bareRounds[i] ? [rps / bareRounds[i]] : []));
  const x = (v: number | null) => (v === null ? '–' : `${v.toFixed(2)}×`);
  const met = (m: boolean | null) => (m === null ? 'not measured' : m ? 'met' : 'NOT met');
  out.push(
    `- Small GET: shim ÷ bare undici ${x(verdict.shimVsBare)} and shim p99 ÷ nginx p99 ${x(verdict.shimP99VsNginx)} (targets ≥ 0.85×, ≤ 2×: ${met(verdict.passThroughMet)}); shim ÷ nginx ${x(verdict.shimVsNginx)}; production path ÷ nginx ${x(verdict.productionVsNginx)} (target ≥ 0.95×: ${met(verdict.productionMet)})`,
  );
  out.push(
    `- Small GET p99: the bare undici pass-through's ÷ nginx's ${x(verdict.bareP99VsNginx)}, the shim's ÷ the bare one's ${x(verdict.shimP99VsBare)}`,
  );
  const pct = (v: number) => `${Math.round(v * 100)} %`;
  const busy = [...pids.keys()].flatMap((name) => {
    const b = small[name];
    return b?.onCpu === undefined || b.runQueue === undefined ? [] : [`${name} ${pct(b.onCpu)} (waiting for a core ${pct(b.runQueue)})`];
  });
  // A main thread on a core nearly all the run is the proxy's limit: its latency at this many
  // connections is then its queue, set by its cost a request (nginx runs in C, over its workers).
  if (busy.length) out.push(`- Small GET, each Node target's main thread on a core during its runs: ${busy.join('; ')}`);
  out.push(
    `- Small GET, each round's shim ÷ bare undici: ${perRound.map((r) => r.toFixed(2)).join(', ') || '–'}${perRound.length > 1 ? ` (median ${median(perRound).toFixed(2)}×, range ${Math.min(...perRound).toFixed(2)}–${Math.max(...perRound).toFixed(2)}×)` : ''}`,
  );
  out.push('');
  out.push(
    '| variant | target | req/s | p50 ms | p99 ms | × nginx req/s | p99 / nginx p99 | × bare undici req/s | GC ms per 10k requests |',
  );
  out.push('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const variant of [...new Set(rows.map((r) => r.variant))]) {
    const ref = typical(variant, NGINX_TARGET);
    const bareRef = typical(variant, BARE_TARGET);
    for (const [name] of targets) {
      const b = typical(variant, name);
      if (!b) continue;
      const ratio = ref ? (b.rps / ref.rps).toFixed(2) : '–';
      const p99 = ref ? (b.p99 / ref.p99).toFixed(2) : '–';
      const vsBare = bareRef ? (b.rps / bareRef.rps).toFixed(2) : '–';
      // A run with failed requests measures the failure, not the proxy: say so beside it.
      const failed = b.errors || b.non2xx ? ` (failed requests: ${b.errors} errors, ${b.non2xx} non-2xx)` : '';
      const gc = b.gcMsPer10k === undefined ? '–' : b.gcMsPer10k.toFixed(0);
      out.push(`| ${variant} | ${name}${failed} | ${b.rps.toFixed(0)} | ${b.p50} | ${b.p99} | ${ratio} | ${p99} | ${vsBare} | ${gc} |`);
    }
  }
  if (o.profileDir && profileDir) {
    // node --cpu-prof names its file itself; the bench's name for it is b4-shim.cpuprofile.
    const written = readdirSync(profileDir).find((f) => f.endsWith('.cpuprofile'));
    if (written) {
      renameSync(join(profileDir, written), join(o.profileDir, 'b4-shim.cpuprofile'));
      out.push('');
      out.push('Shim CPU profile over all its runs (`node --cpu-prof`):');
      out.push('```');
      out.push(formatProfile(summariseProfile(join(o.profileDir, 'b4-shim.cpuprofile'), 15)));
      out.push('```');
    }
    rmSync(profileDir, { recursive: true, force: true });
  }
  return {
    rows,
    small,
    nginx: ng && nginx.bin !== undefined ? nginx.version : null,
    nginxSkipped: nginx.bin === undefined ? nginx.reason : null,
    generator,
    verdict,
    text: out.join('\n'),
  };
}
