import type { Counter } from 'prom-client';

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
 * Increments of a prom-client counter kept in plain numbers and handed over when it is
 * collected (the counter's own `collect` option, run by every scrape): prom-client hashes the
 * labels and validates them on every `inc`, a cost paid here once per scrape instead of once
 * per request.
 */
export class PendingCounts {
  private readonly all: Pending[] = [];
  private readonly children: LabelChildren<Pending>;

  constructor(labelNames: readonly string[]) {
    this.children = new LabelChildren<Pending>((a, b, c) => {
      const values = [a, b, c];
      const labels: Record<string, string> = {};
      for (const [i, name] of labelNames.entries()) labels[name] = values[i]!;
      const p = { labels, n: 0 };
      this.all.push(p);
      return p;
    });
  }

  /** The count of one combination of label values: add to its `n`. */
  of(a: string, b?: string, c?: string): { n: number } {
    return this.children.get(a, b, c);
  }

  /** Hands the counts over to the counter (call from its `collect`). */
  flushInto(counter: Counter<string>): void {
    for (const p of this.all) {
      if (p.n === 0) continue;
      counter.inc(p.labels, p.n);
      p.n = 0;
    }
  }
}
