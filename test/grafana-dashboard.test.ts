import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { metricDefinitions } from '../scripts/metrics-reference.js';
import { createMetrics } from '../src/observability/metrics.js';

/**
 * deploy/grafana-dashboard.json is built on the metrics the shim serves: every metric name in
 * its queries (panels and template variables) is one a fresh shim's /metrics has, or a series
 * of one of its histograms; and it shows who is served what (client_requests_total).
 */

const dashboard = JSON.parse(readFileSync(resolve(import.meta.dirname, '..', 'deploy', 'grafana-dashboard.json'), 'utf8')) as {
  panels: Array<{ title: string; type: string; targets?: Array<{ expr: string }> }>;
  templating: { list: Array<{ query: { query: string } | string }> };
};

/** Every PromQL query of the dashboard. */
const queries = [
  ...dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr)),
  ...dashboard.templating.list.map((v) => (typeof v.query === 'string' ? v.query : v.query.query)),
];

/**
 * The metric names a PromQL expression reads: what is left once strings, label matchers, ranges,
 * grouping clauses and Grafana's variables are taken out, less functions (a name before `(`),
 * keywords and numbers.
 */
function metricNamesIn(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
    .replace(/\$\w+/g, ' ');
  const keywords = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'inf', 'nan']);
  const names: string[] = [];
  for (const m of bare.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const after = bare.slice(m.index + m[0].length).trimStart();
    if (after.startsWith('(') || keywords.has(m[0].toLowerCase())) continue;
    names.push(m[0]);
  }
  return names;
}

describe('deploy/grafana-dashboard.json', () => {
  it('finds the metric names of a query, and only those', () => {
    expect(
      metricNamesIn(
        'histogram_quantile(0.99, sum by (route, le) (rate(zulip_compat_shim_upstream_request_duration_seconds_bucket{instance=~"$instance", route!="events"}[$__rate_interval])))',
      ),
    ).toEqual(['zulip_compat_shim_upstream_request_duration_seconds_bucket']);
    expect(metricNamesIn('1 - sum(rate(a_total[5m])) / sum(rate(b_total{x="y"}[5m]))')).toEqual(['a_total', 'b_total']);
    expect(metricNamesIn('label_values(zulip_compat_shim_build_info{job=~"$job"}, instance)')).toEqual([
      'zulip_compat_shim_build_info',
      'instance',
    ]);
  });

  it('references only metric names the shim serves', async () => {
    const { registry } = createMetrics();
    const served = new Map((await registry.getMetricsAsJSON()).map((m) => [m.name, String(m.type)]));
    const isServed = (name: string): boolean => {
      if (served.has(name)) return true;
      const base = /^(.*)_(bucket|sum|count)$/.exec(name)?.[1];
      return base !== undefined && served.get(base) === 'histogram';
    };
    // label_values(metric, label): the label is not a metric.
    const named = queries.flatMap((q) => metricNamesIn(q.replace(/,\s*\w+\)\s*$/, ')')));
    expect(named.length).toBeGreaterThan(20);
    expect([...new Set(named)].filter((n) => !isServed(n))).toEqual([]);
  });

  it('shows which clients are served which change, the store and the upstream, by the documented names', async () => {
    const documented = new Set((await metricDefinitions()).map((m) => m.name));
    const named = new Set(queries.flatMap((q) => metricNamesIn(q)));
    for (const name of [
      'zulip_compat_shim_client_requests_total',
      'zulip_compat_shim_store_connected',
      'zulip_compat_shim_upstream_reachable',
      'process_resident_memory_bytes',
    ]) {
      expect(named).toContain(name);
      expect(documented).toContain(name);
    }
  });
});
