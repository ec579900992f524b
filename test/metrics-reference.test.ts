import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEPLOYMENT_DOC, metricDefinitions, metricsReference, PREFIX, withMetricsReference } from '../scripts/metrics-reference.js';
import { PROJECT_ROOT } from '../src/version.js';

/** The metrics table of docs/deployment.md is the code's, metric for metric. */
describe('docs/deployment.md metrics reference', () => {
  it('matches src/observability/metrics.ts (run `npm run docs:metrics` after changing a metric)', async () => {
    const doc = readFileSync(DEPLOYMENT_DOC, 'utf8');
    expect(doc).toBe(withMetricsReference(doc, await metricsReference()));
  });

  it('lists the client-facing metrics, the `user` route and the realm-label cap', async () => {
    const table = await metricsReference();
    expect(table).toContain(`| \`${PREFIX}requests_total\` | counter | \`route\`, \`method\`, \`status\` |`);
    expect(table).toContain(`| \`${PREFIX}request_duration_seconds\` | histogram | \`route\`, \`method\` |`);
    expect(table).toContain('`user`');
    expect(table).toContain('kept for the 100 realms');
  });

  it('describes every metric', async () => {
    const undescribed = (await metricDefinitions()).filter((m) => m.help.trim() === '').map((m) => m.name);
    expect(undescribed).toEqual([]);
  });
});

describe('docs/alerts.yml', () => {
  it('names only metrics the shim exports', async () => {
    const alerts = readFileSync(resolve(PROJECT_ROOT, 'docs/alerts.yml'), 'utf8');
    const named = [...new Set(alerts.match(new RegExp(`${PREFIX}\\w+`, 'g')) ?? [])];
    expect(named.length).toBeGreaterThan(5);
    const defs = new Map((await metricDefinitions()).map((m) => [m.name, m.type]));
    const exported = (name: string): boolean => {
      if (defs.has(name)) return true;
      // A histogram's or summary's series: name_bucket, name_sum, name_count.
      const base = /^(.*)_(bucket|sum|count)$/.exec(name)?.[1];
      const type = base ? defs.get(base) : undefined;
      return type === 'histogram' || (type === 'summary' && !name.endsWith('_bucket'));
    };
    expect(named.filter((n) => !exported(n))).toEqual([]);
  });
});
