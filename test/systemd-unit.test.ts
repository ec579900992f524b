import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

/**
 * deploy/zulip-compat-shim.service and the template unit deploy/zulip-compat-shim@.service (one
 * replica per instance, the instance its port): what docs/deployment.md shows of them is in the
 * files, the template differs from the single unit only in the lines naming its instance, and
 * `systemd-analyze` (on the files, without installing them) finds nothing to say against either
 * (`verify`) and rates each sandbox 4 or less (`security`). The systemd-analyze parts are
 * skipped, with the reason printed, where it is missing or too old for `--offline` (systemd 250).
 */

const ROOT = resolve(import.meta.dirname, '..');
const UNIT = resolve(ROOT, 'deploy', 'zulip-compat-shim.service');
const TEMPLATE = resolve(ROOT, 'deploy', 'zulip-compat-shim@.service');
const doc = () => readFileSync(resolve(ROOT, 'docs', 'deployment.md'), 'utf8');
const iniBlocks = () => [...doc().matchAll(/```ini\n([\s\S]*?)```\n/g)].map((m) => m[1]!);

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

// systemd-analyze takes a template through an instance of it: a copy named for port 9981.
const dir = mkdtempSync(join(tmpdir(), 'zcs-units-'));
const INSTANCE = join(dir, 'zulip-compat-shim@9981.service');
copyFileSync(TEMPLATE, INSTANCE);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('deploy/zulip-compat-shim.service', () => {
  it('docs/deployment.md shows the file exactly', () => {
    const copies = iniBlocks().filter((b) => b.includes('ExecStart=') && b.includes('[Service]') && !b.includes('%i'));
    expect(copies).toHaveLength(1);
    expect(copies[0]).toBe(readFileSync(UNIT, 'utf8'));
  });
});

describe('deploy/zulip-compat-shim@.service', () => {
  /** The file's lines without comments and blank lines. */
  const settings = (file: string) =>
    readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l.trim() !== '' && !l.startsWith('#'));

  it('differs from the single unit only where it names its instance: the description, the port and the shared Redis', () => {
    const one = settings(UNIT);
    const each = settings(TEMPLATE);
    const onlyOne = one.filter((l) => !each.includes(l));
    const onlyEach = each.filter((l) => !one.includes(l));
    const cli = '/usr/bin/node /opt/zulip-compat-shim/dist/cli.js';
    const flags = '--config /etc/zulip-compat-shim/config.json --upstream http://127.0.0.1:9992 --trust-proxy 127.0.0.1';
    expect(onlyOne).toEqual([
      'Description=zulip-compat-shim',
      'After=network-online.target nginx.service',
      `ExecStartPre=${cli} --check=config ${flags}`,
      `ExecStart=${cli} ${flags}`,
      `ExecReload=${cli} --check=config ${flags}`,
    ]);
    // The shared Redis as a default the environment file can replace (a password: REDIS_URL there).
    expect(onlyEach).toEqual([
      'Description=zulip-compat-shim replica on port %i',
      'After=network-online.target nginx.service redis-server.service',
      'Environment=REDIS_URL=redis://127.0.0.1:6379',
      `ExecStartPre=${cli} --check=config ${flags} --port %i`,
      `ExecStart=${cli} ${flags} --port %i`,
      `ExecReload=${cli} --check=config ${flags} --port %i`,
    ]);
  });

  it('every line docs/deployment.md shows of it is in the file', () => {
    const shown = iniBlocks().filter((b) => b.includes('%i'));
    expect(shown).toHaveLength(1);
    const file = readFileSync(TEMPLATE, 'utf8').split('\n');
    for (const line of shown[0]!.split('\n').filter((l) => l.trim() !== '' && l.trim() !== '…')) expect(file).toContain(line);
  });
});

describe.each([
  ['zulip-compat-shim.service', UNIT],
  ['zulip-compat-shim@.service, as zulip-compat-shim@9981.service', INSTANCE],
])('%s', (_name, file) => {
  it('reads an environment file and a config file, and checks the configuration before a start and a reload', () => {
    const unit = readFileSync(file, 'utf8');
    expect(unit).toMatch(/^EnvironmentFile=-\/etc\/zulip-compat-shim\/env$/m);
    expect(unit).toMatch(/^ExecStart=.* --config \/etc\/zulip-compat-shim\/config\.json /m);
    expect(unit).toMatch(/^ExecStartPre=.* --check=config /m);
    expect(unit).toMatch(/^ExecReload=.* --check=config [^\n]*\nExecReload=\/bin\/kill -HUP \$MAINPID$/m);
  });

  it('asks for the network to be up before it starts', () => {
    const unit = readFileSync(file, 'utf8');
    expect(unit).toMatch(/^Wants=network-online\.target$/m);
    expect(unit).toMatch(/^After=network-online\.target/m);
    // V8's JIT needs memory it writes and then executes.
    expect(unit).not.toMatch(/^MemoryDenyWriteExecute=/m);
  });

  it.skipIf(!usable)('`systemd-analyze verify` has nothing to say against it', () => {
    const r = spawnSync('systemd-analyze', ['verify', '--no-pager', file], { encoding: 'utf8' });
    expect(`${r.stdout}${r.stderr}`).toBe('');
    expect(r.status).toBe(0);
  });

  it.skipIf(!usable)('`systemd-analyze security --offline=true` rates it 4 or less', () => {
    const r = spawnSync('systemd-analyze', ['security', '--offline=true', '--no-pager', file], { encoding: 'utf8' });
    const output = `${r.stdout}${r.stderr}`;
    const m = /Overall exposure level for [^:]+: (\d+(?:\.\d+)?) /.exec(output);
    expect(m, output).not.toBeNull();
    const score = Number(m?.[1]);
    expect(score, output).toBeLessThanOrEqual(4);
  });
});
