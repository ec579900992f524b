import type { Registry } from 'prom-client';

/**
 * A Prometheus histogram for the per-request path: each label combination's buckets are a
 * plain array found once (`labels(…)` returns a child to keep), so an observation is a bucket
 * search and three additions. prom-client's own Histogram validates and hashes the labels on
 * every `observe`, a few microseconds per request on the pass-through (bench/RESULTS.md, B4).
 * It registers with a prom-client Registry like any metric (the registry reads `get()`), and
 * is exposed in the same text format.
 */

export interface FastHistogramOptions<L extends string> {
  name: string;
  help: string;
  labelNames: readonly L[];
  /** Upper bounds in seconds, ascending; `+Inf` is added. */
  buckets: readonly number[];
  registers: Registry[];
}

export interface HistogramChild {
  observe(value: number): void;
}

class Series implements HistogramChild {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  constructor(
    readonly labels: Record<string, string>,
    private readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length);
  }
  observe(value: number): void {
    if (!Number.isFinite(value)) return;
    const bounds = this.bounds;
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]!) {
        this.counts[i]!++;
        break;
      }
    }
    this.sum += value;
    this.count++;
  }
}

export class FastHistogram<L extends string> {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly name: string;
  readonly help: string;
  private readonly series = new Map<string, Series>();

  constructor(private readonly o: FastHistogramOptions<L>) {
    this.name = o.name;
    this.help = o.help;
    for (const r of o.registers) r.registerMetric(this as unknown as Parameters<Registry['registerMetric']>[0]);
  }

  get labelNames(): readonly L[] {
    return this.o.labelNames;
  }

  /** The child of one label combination, in `labelNames` order; keep it, it is the fast path. */
  labels(...values: string[]): HistogramChild {
    const key = values.join('\u0000');
    let s = this.series.get(key);
    if (!s) {
      const labels: Record<string, string> = {};
      for (const [i, name] of this.o.labelNames.entries()) labels[name] = values[i] ?? '';
      s = new Series(labels, this.o.buckets);
      this.series.set(key, s);
    }
    return s;
  }

  observe(labels: Partial<Record<L, string>>, value: number): void {
    this.labels(...this.o.labelNames.map((n) => labels[n] ?? '')).observe(value);
  }

  reset(): void {
    this.series.clear();
  }

  /** What prom-client's Registry renders: cumulative buckets, `_sum` and `_count` per series. */
  async get() {
    const values: Array<{ labels: Record<string, string | number>; value: number; metricName: string }> = [];
    for (const s of this.series.values()) {
      let cumulative = 0;
      for (const [i, bound] of this.o.buckets.entries()) {
        cumulative += s.counts[i]!;
        values.push({ labels: { le: bound, ...s.labels }, value: cumulative, metricName: `${this.name}_bucket` });
      }
      values.push({ labels: { le: '+Inf', ...s.labels }, value: s.count, metricName: `${this.name}_bucket` });
      values.push({ labels: s.labels, value: s.sum, metricName: `${this.name}_sum` });
      values.push({ labels: s.labels, value: s.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }
}
