import cluster, { type Worker } from 'node:cluster';
import { AggregatorRegistry, type Registry } from 'prom-client';
import type { Logger } from './observability/logger.js';

/**
 * `server.workers` above 1: a primary process forks that many workers, each a full shim, and
 * node:cluster shares the listening port among them. The workers are replicas of one another
 * (S1: their state is shared through Redis); the primary serves nothing itself. It forwards
 * the shutdown signals (X9), replaces a worker that died, stops everything when a worker
 * reports a configuration or start-up mistake (exit 2), and gathers `/metrics` from every
 * worker for the one a scrape reached.
 */

/** One registry's series, as `getMetricsAsJSON` gives them. */
type Series = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

/** Messages a worker sends the primary. */
type ToPrimary =
  | { zcs: 'failure'; line: string }
  | { zcs: 'metrics'; id: number }
  | { zcs: 'flush' }
  /** The shim exists: the worker answers `collect` from now on. */
  | { zcs: 'ready' }
  | { zcs: 'collected'; id: number; metrics: Series };
/** The primary asks a ready worker for its registry's series. */
interface Collect {
  zcs: 'collect';
  id: number;
}
/** The primary's answer to a worker's `metrics` request. */
interface MetricsReply {
  zcs: 'metrics';
  id: number;
  text?: string;
  error?: string;
}

const isMessage = (m: unknown): m is { zcs: string } =>
  typeof m === 'object' && m !== null && typeof (m as { zcs?: unknown }).zcs === 'string';

/** A worker that dies this soon after another is restarted after a longer wait. */
const RESTART_WINDOW_MS = 60_000;
const RESTART_FIRST_DELAY_MS = 250;
const RESTART_MAX_DELAY_MS = 30_000;
/** Beyond the workers' own drain deadline, how long the primary waits before killing one. */
const STOP_MARGIN_MS = 5_000;

/** The wait before replacing a dead worker, given the deaths within the window (1 = this one). */
export function restartDelayMs(recentDeaths: number): number {
  return Math.min(RESTART_MAX_DELAY_MS, RESTART_FIRST_DELAY_MS * 2 ** Math.max(0, recentDeaths - 1));
}

export const isWorker = (): boolean => cluster.isWorker;

export interface PrimaryOptions {
  workers: number;
  log: Logger;
  shutdownGraceMs: number;
}

/** Runs the primary until the workers are gone; resolves with the process's exit code. */
export function runPrimary(o: PrimaryOptions): Promise<number> {
  const { log } = o;
  const ready = new Set<Worker>();
  const collections = new Map<number, { pending: number; series: Series[]; done(e?: Error): void }>();
  let nextCollection = 0;
  /** Every ready worker's series, summed (prom-client's cluster aggregation, `aggregator` per metric). */
  const clusterMetrics = () =>
    new Promise<string>((resolve, reject) => {
      const id = nextCollection++;
      const workers = [...ready].filter((w) => w.isConnected());
      const timer = setTimeout(() => c.done(new Error('a worker did not send its metrics within 5 s')), 5_000);
      const c = {
        pending: workers.length,
        series: [] as Series[],
        done(e?: Error) {
          if (!collections.delete(id)) return;
          clearTimeout(timer);
          if (e) reject(e);
          else AggregatorRegistry.aggregate(c.series).metrics().then(resolve, reject);
        },
      };
      collections.set(id, c);
      for (const w of workers) w.send({ zcs: 'collect', id } satisfies Collect);
      if (c.pending === 0) c.done();
    });
  const deaths: number[] = [];
  const restarts = new Set<NodeJS.Timeout>();
  let stopping = false;
  let exitCode = 0;
  let failureShown = false;

  return new Promise<number>((done) => {
    const finishIfEmpty = () => {
      if (stopping && Object.keys(cluster.workers ?? {}).length === 0) done(exitCode);
    };
    const stop = (signal: NodeJS.Signals, code: number) => {
      if (stopping) return;
      stopping = true;
      exitCode = code;
      for (const t of restarts) clearTimeout(t);
      restarts.clear();
      log.info({ signal, workers: Object.keys(cluster.workers ?? {}).length }, 'shutting down the workers');
      for (const w of Object.values(cluster.workers ?? {})) w?.process.kill(signal);
      // Each worker drains up to the grace period (X9); one that hangs beyond it is killed.
      setTimeout(() => {
        for (const w of Object.values(cluster.workers ?? {})) {
          log.error({ pid: w?.process.pid }, 'worker did not stop within the grace period: killed');
          w?.process.kill('SIGKILL');
        }
      }, o.shutdownGraceMs + STOP_MARGIN_MS).unref();
      finishIfEmpty();
    };

    cluster.on('message', (worker: Worker, m: unknown) => {
      if (!isMessage(m)) return;
      const msg = m as ToPrimary;
      if (msg.zcs === 'failure') {
        // Every worker meets the same mistake (a port in use): one line, as a single process says it.
        if (!failureShown) process.stderr.write(`${msg.line}\n`);
        failureShown = true;
      } else if (msg.zcs === 'ready') {
        ready.add(worker);
      } else if (msg.zcs === 'collected') {
        const c = collections.get(msg.id);
        if (!c) return;
        c.series.push(msg.metrics);
        if (--c.pending === 0) c.done();
      } else if (msg.zcs === 'metrics') {
        const reply = (r: Omit<MetricsReply, 'zcs' | 'id'>) => {
          if (worker.isConnected()) worker.send({ zcs: 'metrics', id: msg.id, ...r } satisfies MetricsReply);
        };
        clusterMetrics().then(
          (text) => reply({ text }),
          (e: unknown) => reply({ error: (e as Error).message }),
        );
      }
    });

    cluster.on('exit', (worker, code, signal) => {
      ready.delete(worker);
      if (stopping) {
        // A worker stopped by the forwarded signal before it could handle it exited by that signal.
        if (code && !exitCode) exitCode = code;
        finishIfEmpty();
        return;
      }
      if (code === 2) {
        // A configuration or start-up mistake: every replacement would meet it again.
        stop('SIGTERM', 2);
        return;
      }
      const now = Date.now();
      deaths.push(now);
      while (deaths.length && deaths[0]! < now - RESTART_WINDOW_MS) deaths.shift();
      const delayMs = restartDelayMs(deaths.length);
      log.error({ pid: worker.process.pid, code, signal, restartInMs: delayMs }, 'worker exited unexpectedly: replacing it');
      const t = setTimeout(() => {
        restarts.delete(t);
        if (!stopping) cluster.fork();
      }, delayMs);
      restarts.add(t);
    });

    for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => stop(signal, 0));
    // X9: each worker reloads its configuration; nothing stops.
    process.on('SIGHUP', () => {
      for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGHUP');
    });
    log.info({ workers: o.workers }, 'starting worker processes');
    for (let i = 0; i < o.workers; i++) cluster.fork();
  });
}

/** In a worker: the one-line start-up failure goes to the primary, which shows it once. */
export function reportFailure(line: string): void {
  process.send?.({ zcs: 'failure', line } satisfies ToPrimary);
}

/** In a worker: exits once the messages already sent to the primary are on their way. */
export function exitWorker(code: number): void {
  try {
    process.send!({ zcs: 'flush' } satisfies ToPrimary, undefined, {}, () => process.exit(code));
  } catch {
    process.exit(code);
  }
}

/** In a worker, once the shim exists: answers the primary's requests for `registry`'s series. */
export function answerMetricsRequests(registry: Registry): void {
  process.on('message', (m: unknown) => {
    if (!isMessage(m) || m.zcs !== 'collect') return;
    const { id } = m as Collect;
    void registry.getMetricsAsJSON().then((metrics) => process.send?.({ zcs: 'collected', id, metrics } satisfies ToPrimary));
  });
  process.send?.({ zcs: 'ready' } satisfies ToPrimary);
}

/**
 * In a worker: `/metrics` text for the whole cluster. The primary asks every worker for its
 * ready worker for its series and sums them.
 */
export function clusterMetricsText(): () => Promise<string> {
  const waiting = new Map<number, { resolve: (s: string) => void; reject: (e: Error) => void }>();
  let nextId = 0;
  process.on('message', (m: unknown) => {
    if (!isMessage(m) || m.zcs !== 'metrics') return;
    const r = m as MetricsReply;
    const w = waiting.get(r.id);
    if (!w) return;
    waiting.delete(r.id);
    if (r.text !== undefined) w.resolve(r.text);
    else w.reject(new Error(r.error ?? 'no metrics from the primary'));
  });
  return () =>
    new Promise<string>((resolve, reject) => {
      const id = nextId++;
      waiting.set(id, { resolve, reject });
      process.send!({ zcs: 'metrics', id } satisfies ToPrimary);
    });
}
