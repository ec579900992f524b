import type { Metrics } from './metrics.js';
import type { RouteLabel } from '../http/api-routes.js';
import { statusLabel } from './route-label.js';
import { LabelChildren } from './label-children.js';

/**
 * The metrics hook of both upstream paths (the pass-through and the shim's own calls): one call
 * per upstream exchange, when its response headers arrive or when it fails without an answer.
 */
export type UpstreamOutcome = number | 'error' | 'timeout';
export type UpstreamObserver = (route: RouteLabel, outcome: UpstreamOutcome, seconds: number) => void;

export function upstreamObserver(m: Pick<Metrics, 'upstreamRequestCounts' | 'upstreamDuration' | 'upstreamAnswered'>): UpstreamObserver {
  const count = (route: string, status: string) => m.upstreamRequestCounts.of(route, status);
  const durations = new LabelChildren((route) => m.upstreamDuration.labels(route as RouteLabel));
  return (route, outcome, seconds) => {
    count(route, statusLabel(outcome)).n++;
    // upstream_reachable: did the last exchange get an answer (any status)?
    m.upstreamAnswered.last = typeof outcome === 'number' ? 1 : 0;
    // Only answered requests: a timeout would put the timeout itself into the latency buckets.
    if (typeof outcome === 'number') durations.get(route).observe(seconds);
  };
}
