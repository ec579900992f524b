import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * deploy/zulip-compat-shim.service: the copy docs/deployment.md shows is the file itself, and
 * `systemd-analyze security` (on the file, without installing it) rates its sandbox 4 or less.
 * The second part is skipped, with the reason printed, where systemd-analyze is missing or too
 * old for `--offline` (systemd 250).
 */

const ROOT = resolve(import.meta.dirname, '..');
const UNIT = resolve(ROOT, 'deploy', 'zulip-compat-shim.service');

function systemdVersion(): number | undefined {
  const r = spawnSync('systemd-analyze', ['--version'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) return undefined;
  const m = /systemd (\d+)/.exec(r.stdout);
  return m ? Number(m[1]) : undefined;
}

const version = systemdVersion();
const usable = version !== undefined && version >= 250;
if (!usable) {
  console.warn(
    `systemd-unit security test skipped: ${version === undefined ? 'systemd-analyze is not installed' : `systemd ${version} has no --offline (250 or later)`}`,
  );
}

describe('deploy/zulip-compat-shim.service', () => {
  it('docs/deployment.md shows the file exactly', () => {
    const doc = readFileSync(resolve(ROOT, 'docs', 'deployment.md'), 'utf8');
    const unit = readFileSync(UNIT, 'utf8');
    const blocks = [...doc.matchAll(/```ini\n([\s\S]*?)```\n/g)].map((m) => m[1]);
    const copies = blocks.filter((b) => b?.includes('ExecStart=') && b.includes('[Service]'));
    expect(copies).toHaveLength(1);
    expect(copies[0]).toBe(unit);
  });

  it('asks for the network to be up before it starts', () => {
    const unit = readFileSync(UNIT, 'utf8');
    expect(unit).toMatch(/^Wants=network-online\.target$/m);
    expect(unit).toMatch(/^After=network-online\.target/m);
    // V8's JIT needs memory it writes and then executes.
    expect(unit).not.toMatch(/^MemoryDenyWriteExecute=/m);
  });

  it.skipIf(!usable)('`systemd-analyze security --offline=true` rates it 4 or less', () => {
    const r = spawnSync('systemd-analyze', ['security', '--offline=true', '--no-pager', UNIT], { encoding: 'utf8' });
    const output = `${r.stdout}${r.stderr}`;
    const m = /Overall exposure level for [^:]+: (\d+(?:\.\d+)?) /.exec(output);
    expect(m, output).not.toBeNull();
    const score = Number(m?.[1]);
    expect(score, output).toBeLessThanOrEqual(4);
  });
});
