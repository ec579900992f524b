import { existsSync, openSync, readSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { constants, monitorEventLoopDelay, PerformanceObserver, type IntervalHistogram } from 'node:perf_hooks';
import { loadConfig } from '../src/config/index.js';
import { createLogger } from '../src/observability/logger.js';
import { tuneRuntime } from '../src/runtime.js';
import { createShim } from '../src/server.js';
import { serveParent } from './children.js';

/**
 * The shim in a process of its own, started with createShim as the CLI would, and reporting
 * its own measurements over IPC: event-loop delay, CPU time, memory (after a GC when the
 * process runs with --expose-gc).
 * argv: upstreamUrl coalesceMs logLevel [redisUrl keyPrefix]
 */

// As the CLI starts a shim process.
tuneRuntime();
const [upstream = '', coalesceMs = '5000', logLevel = 'info', redisUrl, keyPrefix] = process.argv.slice(2);
const redisArgs = redisUrl ? ['--redis', redisUrl] : [];
const { config } = loadConfig(
  ['--upstream', upstream, '--port', '0', '--coalesce-ms', coalesceMs, '--log-level', logLevel, ...redisArgs],
  {},
);
if (keyPrefix) config.store.keyPrefix = keyPrefix;
// The request log goes to stdout, which the bench discards: it is written, as in production.
const log = createLogger(config.log.level);
const shim = createShim({ config, log, target: upstream, upstreamId: upstream });
const { url } = await shim.listen(0, '127.0.0.1');

let eld: IntervalHistogram | undefined;

/**
 * CPU time of this (the main) thread in ms: Linux's per-thread scheduler statistics, read
 * through one kept-open descriptor (a few µs); elsewhere the whole process's CPU time, which
 * also counts GC helper and zlib threads.
 */
const threadCpuMs: () => number = (() => {
  try {
    const fd = openSync('/proc/thread-self/schedstat', 'r');
    const buf = Buffer.alloc(128);
    const read = () => Number(buf.toString('latin1', 0, readSync(fd, buf, 0, 128, 0)).split(' ')[0]) / 1e6;
    if (!Number.isFinite(read())) throw new Error('unreadable');
    return read;
  } catch {
    return () => {
      const c = process.cpuUsage();
      return (c.user + c.system) / 1000;
    };
  }
})();
const cpuSource = existsSync('/proc/thread-self/schedstat') ? 'main thread (schedstat)' : 'process (cpuUsage)';

/**
 * Beside the delay histogram: a 1 ms timer that notes, for each gap between its ticks, the
 * CPU time the main thread used in it. The longest gap in wall time includes time the thread
 * spent waiting for a core (the machine is shared); the CPU used in a gap does not.
 */
interface BlockWatch {
  timer: NodeJS.Timeout;
  last: number;
  lastCpu: number;
  maxGapMs: number;
  cpuInMaxGapMs: number;
  maxCpuMs: number;
  gapOfMaxCpuMs: number;
}
let watch: BlockWatch | undefined;

/** The longest garbage-collection pause seen while watching (V8's own timing of each GC). */
let gcWatch: { observer: PerformanceObserver; maxMs: number; kind: string } | undefined;
const GC_KINDS: Record<number, string> = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak callbacks',
};

function startGcWatch(): void {
  gcWatch?.observer.disconnect();
  const w = {
    maxMs: 0,
    kind: '',
    observer: new PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        if (e.duration <= w.maxMs) continue;
        w.maxMs = e.duration;
        w.kind = GC_KINDS[(e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind ?? -1] ?? 'other';
      }
    }),
  };
  w.observer.observe({ entryTypes: ['gc'] });
  gcWatch = w;
}

function startWatch(): void {
  if (watch) clearInterval(watch.timer);
  const w: BlockWatch = {
    timer: setInterval(() => {
      const now = performance.now();
      const cpu = threadCpuMs();
      const gap = now - w.last;
      const used = cpu - w.lastCpu;
      if (gap > w.maxGapMs) {
        w.maxGapMs = gap;
        w.cpuInMaxGapMs = used;
      }
      if (used > w.maxCpuMs) {
        w.maxCpuMs = used;
        w.gapOfMaxCpuMs = gap;
      }
      w.last = now;
      w.lastCpu = cpu;
    }, 1),
    last: performance.now(),
    lastCpu: threadCpuMs(),
    maxGapMs: 0,
    cpuInMaxGapMs: 0,
    maxCpuMs: 0,
    gapOfMaxCpuMs: 0,
  };
  watch = w;
}
let profiler: Session | undefined;
let cpuMark = process.cpuUsage();
const gc = (globalThis as { gc?: () => void }).gc;

function memory(collect: boolean) {
  if (collect && gc) {
    gc();
    gc();
  }
  const m = process.memoryUsage();
  return {
    rss: m.rss,
    heapUsed: m.heapUsed,
    heapTotal: m.heapTotal,
    external: m.external,
    arrayBuffers: m.arrayBuffers,
    collected: collect && !!gc,
  };
}

serveParent(
  url,
  {
    /** Starts measuring event-loop delay (B6) at 1 ms resolution. */
    'eld-start': () => {
      eld?.disable();
      eld = monitorEventLoopDelay({ resolution: 1 });
      eld.enable();
      startWatch();
      startGcWatch();
    },
    /** Stops measuring: the longest delay seen, and the distribution (ms). */
    'eld-stop': () => {
      if (!eld) return undefined;
      eld.disable();
      const ms = (ns: number) => ns / 1e6;
      const w = watch!;
      clearInterval(w.timer);
      watch = undefined;
      const r = {
        maxMs: ms(eld.max),
        p99Ms: ms(eld.percentile(99)),
        p50Ms: ms(eld.percentile(50)),
        meanMs: ms(eld.mean),
        /** The longest gap between 1 ms ticks, and the CPU the process used in it. */
        maxGapMs: w.maxGapMs,
        cpuInMaxGapMs: w.cpuInMaxGapMs,
        /** The gap in which the process used the most CPU (the longest block net of waiting). */
        maxCpuInGapMs: w.maxCpuMs,
        gapOfMaxCpuMs: w.gapOfMaxCpuMs,
        cpuSource,
        /** The longest GC pause while watching, and its kind. */
        maxGcMs: gcWatch?.maxMs ?? 0,
        maxGcKind: gcWatch?.kind ?? '',
      };
      gcWatch?.observer.disconnect();
      gcWatch = undefined;
      eld = undefined;
      return r;
    },
    /** CPU time used since the last call (ms). */
    cpu: () => {
      const d = process.cpuUsage(cpuMark);
      cpuMark = process.cpuUsage();
      return (d.user + d.system) / 1000;
    },
    /** args: { gc: boolean } */
    memory: (a) => memory((a as { gc?: boolean } | undefined)?.gc === true),
    /** Waits for presence fetches still in flight (one whose leader already had its answer, B7). */
    settled: () => shim.context.snapshots.settled(config.upstream.timeoutMs),
    metrics: () => shim.context.metrics.registry.metrics(),
    /** Starts the V8 CPU profiler (the same profile `node --cpu-prof` writes), for one phase. */
    'profile-start': async () => {
      profiler = new Session();
      profiler.connect();
      await profiler.post('Profiler.enable');
      await profiler.post('Profiler.setSamplingInterval', { interval: 250 });
      await profiler.post('Profiler.start');
    },
    /** args: { file }: stops the profiler and writes the .cpuprofile there. */
    'profile-stop': async (a) => {
      if (!profiler) return undefined;
      const { profile } = await profiler.post('Profiler.stop');
      profiler.disconnect();
      profiler = undefined;
      const file = (a as { file: string }).file;
      writeFileSync(file, JSON.stringify(profile));
      return file;
    },
  },
  () => shim.close(),
);
