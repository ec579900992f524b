import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { nodeArgsFor, ROOT } from './support/build.js';
import { BARE_TARGET, b4Verdict, NGINX_TARGET, PRODUCTION_TARGET, SHIM_TARGET } from '../bench/b4.js';
import { basicAuth, PRESENCE_PATH, SMALL_PATH, SyntheticZulip } from '../bench/synthetic-upstream.js';

/**
 * Keeps `npm run bench` from rotting: a tiny run end to end (200 users, 0.3 s per measured
 * phase, 200 polls per RSS run, no nginx) must write a results file of the agreed shape. Figures
 * are not checked: they depend on the machine and on what else runs on it.
 */

const run = promisify(execFile);
const out = mkdtempSync(join(tmpdir(), 'zcs-bench-smoke-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

const NUMERIC_KEYS = [
  'bandwidth_ratio_full_modern',
  'bandwidth_ratio_full_legacy',
  'upstream_fetch_reduction',
  'presence_p50_ms_shim',
  'presence_p50_ms_direct',
  'passthrough_rps_shim',
  'passthrough_rps_direct',
  'ledger_bytes_per_user',
  'rss_ratio_1000_vs_1_callers',
  'max_event_loop_block_ms',
];

describe('npm run bench, tiny', () => {
  it('runs end to end and writes results.json and RESULTS.md', { timeout: 240_000 }, async () => {
    const tiny = ['--quick', '--users', '200', '--clients', '50', '--phase-seconds', '0.3', '--rss-polls', '200', '--no-nginx'];
    await run(process.execPath, [...nodeArgsFor('bench/run.ts'), ...tiny, '--out', out], {
      cwd: ROOT,
      timeout: 230_000,
      maxBuffer: 16 * 1024 * 1024,
    });
    const r = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8')) as Record<string, unknown>;
    for (const key of NUMERIC_KEYS) {
      expect(typeof r[key], key).toBe('number');
      expect(Number.isFinite(r[key]), key).toBe(true);
    }
    expect(r.passthrough_rps_nginx).toBeNull(); // skipped with --no-nginx
    const machine = r.machine as { cpu: unknown; cores: unknown };
    expect(typeof machine.cpu).toBe('string');
    expect(typeof machine.cores).toBe('number');
    expect(r.node).toBe(process.version);
    expect(Number.isNaN(Date.parse(r.date as string))).toBe(false);
    expect((r.targets as unknown[]).length).toBeGreaterThanOrEqual(7);
    expect(readFileSync(join(out, 'RESULTS.md'), 'utf8')).toContain('| B1 bytes per poll');
  });
});

describe('synthetic upstream flavours', () => {
  const post = (url: string, body: string) =>
    fetch(`${url}${PRESENCE_PATH}`, {
      method: 'POST',
      headers: { authorization: basicAuth(3), 'content-type': 'application/x-www-form-urlencoded' },
      body,
    }).then((r) => r.json() as Promise<Record<string, unknown>>);

  it('2.1: no feature level, legacy presence keyed by email, pings counted apart', async () => {
    const z = new SyntheticZulip({ flavour: '2.1', users: 20 });
    const url = await z.start();
    try {
      const settings = (await (await fetch(`${url}/api/v1/server_settings`)).json()) as Record<string, unknown>;
      expect(settings.zulip_feature_level).toBeUndefined();
      const full = await post(url, 'status=active&slim_presence=true');
      expect(Object.keys(full.presences as object)).toHaveLength(20);
      expect(Object.keys(full.presences as object)[0]).toMatch(/@/);
      expect(typeof full.server_timestamp).toBe('number');
      expect(await post(url, 'status=active&ping_only=true')).toEqual({ result: 'success', msg: '' });
      const members = (
        (await (await fetch(`${url}/api/v1/users`)).json()) as { members: Array<{ user_id: number; email: string; date_joined: string }> }
      ).members;
      expect(members).toHaveLength(20);
      expect((await fetch(`${url}${SMALL_PATH}`)).status).toBe(200);
      expect(z.stats).toMatchObject({ presenceFull: 1, presencePing: 1, usersList: 1, serverSettings: 1, small: 1 });
    } finally {
      await z.stop();
    }
  });

  it('7.0: feature level 185, slim presence on request, churn changes the answer', async () => {
    const z = new SyntheticZulip({ flavour: '7.0', users: 50, churnPerMinute: 0.2, stepsPerMinute: 1 });
    const url = await z.start();
    try {
      const settings = (await (await fetch(`${url}/api/v1/server_settings`)).json()) as Record<string, unknown>;
      expect(settings.zulip_feature_level).toBe(185);
      const slim = (await post(url, 'status=active&slim_presence=true')).presences as Record<
        string,
        { active_timestamp: number; idle_timestamp: number }
      >;
      expect(Object.keys(slim)).toHaveLength(50);
      for (const e of Object.values(slim)) expect(e.idle_timestamp).toBeGreaterThanOrEqual(e.active_timestamp);
      const legacy = (await post(url, 'status=active')).presences as Record<string, unknown>;
      expect(Object.keys(legacy)[0]).toMatch(/@/);
      z.churnStep();
      const after = (await post(url, 'status=active&slim_presence=true')).presences as typeof slim;
      const changed = Object.keys(slim).filter((k) => JSON.stringify(slim[k]) !== JSON.stringify(after[k]));
      expect(changed.length).toBeGreaterThan(0);
      expect(changed.length).toBeLessThanOrEqual(10);
    } finally {
      await z.stop();
    }
  });
});

describe('B4 verdict', () => {
  const row = (target: string, rps: number, p99: number) => ({ variant: 'small', target, rps, p50: p99 / 2, p99, errors: 0, non2xx: 0 });
  const small = (shimRps: number, shimP99: number) => ({
    [NGINX_TARGET]: row(NGINX_TARGET, 40_000, 2.5),
    [PRODUCTION_TARGET]: row(PRODUCTION_TARGET, 39_000, 2.6),
    [BARE_TARGET]: row(BARE_TARGET, 30_000, 4),
    [SHIM_TARGET]: row(SHIM_TARGET, shimRps, shimP99),
  });

  it.each([
    ['both met', 27_000, 4.8, true],
    ['the rate below 0.85× the bare pass-through', 25_000, 4.8, false],
    ['the p99 above 2× nginx', 27_000, 5.1, false],
  ])('%s', (_what, rps, p99, met) => {
    const v = b4Verdict(small(rps, p99));
    expect(v.passThroughMet).toBe(met);
    expect(v.productionMet).toBe(true); // 39,000 ÷ 40,000
    expect(v.shimVsBare).toBeCloseTo(rps / 30_000);
    expect(v.shimP99VsNginx).toBeCloseTo(p99 / 2.5);
    // The p99 target's margin: the bare pass-through's own tail, and the shim's over it.
    expect(v.bareP99VsNginx).toBeCloseTo(1.6);
    expect(v.shimP99VsBare).toBeCloseTo(p99 / 4);
  });

  it('decides nothing about a reference that was not measured', () => {
    const v = b4Verdict({ [SHIM_TARGET]: row(SHIM_TARGET, 27_000, 4.8) });
    expect([v.passThroughMet, v.productionMet, v.bareP99VsNginx, v.shimP99VsBare]).toEqual([null, null, null, null]);
  });
});
