import type { Metrics } from './metrics.js';
import { routeLabel, statusLabel } from './route-label.js';

/**
 * The metrics hook of both upstream paths (the pass-through and the shim's own calls): one call
 * per upstream exchange, when its response headers arrive or when it fails without an answer.
 */
export type UpstreamOutcome = number | 'error' | 'timeout';
export type UpstreamObserver = (path: string, outcome: UpstreamOutcome, seconds: number) => void;

export function upstreamObserver(m: Pick<Metrics, 'upstreamRequests' | 'upstreamDuration'>): UpstreamObserver {
  return (path, outcome, seconds) => {
    const route = routeLabel(path);
    m.upstreamRequests.inc({ route, status: statusLabel(outcome) });
    // Only answered requests: a timeout would put the timeout itself into the latency buckets.
    if (typeof outcome === 'number') m.upstreamDuration.observe({ route }, seconds);
  };
}
