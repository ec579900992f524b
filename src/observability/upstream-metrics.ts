import type { Counter } from 'prom-client';
import type { Metrics } from './metrics.js';
import type { RouteLabel } from '../http/api-routes.js';
import { statusLabel } from './route-label.js';

/**
 * The metrics hook of both upstream paths (the pass-through and the shim's own calls): one call
 * per upstream exchange, when its response headers arrive or when it fails without an answer.
 */
export type UpstreamOutcome = number | 'error' | 'timeout';
export type UpstreamObserver = (route: RouteLabel, outcome: UpstreamOutcome, seconds: number) => void;

/**
 * prom-client label children looked up once per combination of (up to three) label values,
 * then kept in nested maps: no key string or argument array built per call. The label values
 * are bounded sets, so the maps stay small.
 */
export class LabelChildren<C> {
  private readonly children = new Map<string, Map<string, Map<string, C>>>();
  constructor(private readonly make: (a: string, b: string, c: string) => C) {}
  get(a: string, b = '', c = ''): C {
    let byB = this.children.get(a);
    if (!byB) {
      byB = new Map();
      this.children.set(a, byB);
    }
    let byC = byB.get(b);
    if (!byC) {
      byC = new Map();
      byB.set(b, byC);
    }
    let child = byC.get(c);
    if (child === undefined) {
      child = this.make(a, b, c);
      byC.set(c, child);
    }
    return child;
  }
}

interface Pending {
  labels: Record<string, string>;
  n: number;
}

/**
 * Increments of a prom-client counter kept in plain numbers and handed over when `/metrics`
 * is read (prom-client's `collect` hook): prom-client hashes the labels and validates them on
 * every `inc`, a cost paid here once per scrape instead of once per request.
 */
export function deferredCounter(counter: Counter<string>): (a: string, b?: string, c?: string) => { n: number } {
  const names = (counter as unknown as { labelNames: string[] }).labelNames;
  const all: Pending[] = [];
  const children = new LabelChildren<Pending>((a, b, c) => {
    const values = [a, b, c];
    const labels: Record<string, string> = {};
    for (const [i, name] of names.entries()) labels[name] = values[i]!;
    const p = { labels, n: 0 };
    all.push(p);
    return p;
  });
  const hooked = counter as unknown as { collect?: () => unknown };
  const previous = hooked.collect;
  hooked.collect = () => {
    for (const p of all) {
      if (p.n === 0) continue;
      counter.inc(p.labels, p.n);
      p.n = 0;
    }
    return previous?.call(counter);
  };
  return (a, b, c) => children.get(a, b, c);
}

export function upstreamObserver(m: Pick<Metrics, 'upstreamRequests' | 'upstreamDuration'>): UpstreamObserver {
  const count = deferredCounter(m.upstreamRequests);
  const durations = new LabelChildren((route) => m.upstreamDuration.labels(route as RouteLabel));
  return (route, outcome, seconds) => {
    count(route, statusLabel(outcome)).n++;
    // Only answered requests: a timeout would put the timeout itself into the latency buckets.
    if (typeof outcome === 'number') durations.get(route).observe(seconds);
  };
}
