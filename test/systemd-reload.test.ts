import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { logLine, ROOT, runCli, until, type CliRun } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';

/**
 * The shipped unit driven as systemd drives it (X9, issue 48): its EnvironmentFile= read into the
 * environment, ExecStartPre= before ExecStart=, and ExecReload='s lines in order, the next only
 * when the one before exited 0, with `/bin/kill -HUP $MAINPID` as a signal to the running shim.
 * The unit's /etc files are the deploy/ examples copied to a directory of the test's own; the
 * upstream is a fake Zulip (the unit's http://127.0.0.1:9992).
 */

const UNIT = readFileSync(resolve(ROOT, 'deploy', 'zulip-compat-shim.service'), 'utf8');
const CLI = '/usr/bin/node /opt/zulip-compat-shim/dist/cli.js';
const CONFIG = '/etc/zulip-compat-shim/config.json';
const ENV = '/etc/zulip-compat-shim/env';

/** Every value of a unit setting (`ExecReload=` may be given more than once), in order. */
const values = (key: string) => [...UNIT.matchAll(new RegExp(`^${key}=(.*)$`, 'gm'))].map((m) => m[1]!);

/** An environment file as systemd reads it: VAR=value lines, comments and blank lines skipped. */
function readEnvFile(file: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const m = /^\s*([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    if (m) env[m[1]!] = m[2]!.trim();
  }
  return env;
}

let fake: FakeZulip;
let dir: string;
let configFile: string;
let envFile: string;

beforeAll(async () => {
  fake = await startFake({ era: '2.1' });
  dir = mkdtempSync(join(tmpdir(), 'zcs-systemd-'));
  configFile = join(dir, 'config.json');
  envFile = join(dir, 'env');
  copyFileSync(resolve(ROOT, 'deploy', 'config.example.json'), configFile);
  // The example, as shipped (every line a comment), and one line of the operator's: a free port
  // instead of 9991, so the test runs beside anything.
  writeFileSync(envFile, `${readFileSync(resolve(ROOT, 'deploy', 'env.example'), 'utf8')}PORT=0\n`);
});
afterAll(async () => {
  await fake.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A command line of the unit as the test runs it: the CLI's arguments with the test's files and upstream. */
function cliArgs(command: string): string[] {
  expect(command.startsWith(`${CLI} `), command).toBe(true);
  return command
    .slice(CLI.length + 1)
    .replaceAll(CONFIG, configFile)
    .replaceAll('http://127.0.0.1:9992', fake.url)
    .split(' ');
}

/** The environment systemd gives every command of the unit: its EnvironmentFile= (optional: `-`). */
function unitEnv(): Record<string, string> {
  const [file] = values('EnvironmentFile');
  expect(file).toBe(`-${ENV}`);
  return readEnvFile(envFile);
}

/** A GET through the shim with this Host: its status. */
const statusFor = (listen: URL, host: string) =>
  new Promise<number>((done, fail) => {
    http
      .get({ host: listen.hostname, port: listen.port, path: '/api/v1/server_settings', headers: { host } }, (res) => {
        res.resume();
        done(res.statusCode ?? 0);
      })
      .on('error', fail);
  });

/** `systemctl reload`: ExecReload='s lines in order, stopping at the first that fails; its exit code. */
async function reload(main: CliRun): Promise<{ code: number; stderr: string }> {
  for (const command of values('ExecReload')) {
    if (command === '/bin/kill -HUP $MAINPID') {
      main.child.kill('SIGHUP');
      continue;
    }
    const run = runCli(cliArgs(command), { env: unitEnv() });
    const code = (await run.exited) ?? 1;
    if (code !== 0) return { code, stderr: run.stderr.join('') };
  }
  return { code: 0, stderr: '' };
}

describe('deploy/zulip-compat-shim.service, run as systemd runs it', { timeout: 90_000 }, () => {
  it('names an environment file and a config file, checks the configuration alone before a start and before a reload', () => {
    expect(values('EnvironmentFile')).toEqual([`-${ENV}`]);
    const [start] = values('ExecStart');
    expect(start).toContain(`--config ${CONFIG}`);
    expect(start).toContain('--trust-proxy 127.0.0.1');
    // The check is the start's own command line, plus --check=config.
    expect(values('ExecStartPre')).toEqual([start!.replace(`${CLI} `, `${CLI} --check=config `)]);
    expect(values('ExecReload')).toEqual([values('ExecStartPre')[0], '/bin/kill -HUP $MAINPID']);
  });

  it('starts; `systemctl reload` after an edit of the config file changes a setting; a bad edit is refused and changes nothing', async () => {
    const [pre] = values('ExecStartPre');
    const check = runCli(cliArgs(pre!), { env: unitEnv() });
    expect(await check.exited).toBe(0);
    expect(check.stdout).toEqual(['zulip-compat-shim: check: configuration: valid']);

    const main = runCli(cliArgs(values('ExecStart')[0]!), { env: unitEnv() });
    try {
      const start = await until('the start-up line', () => logLine(main, 'zulip-compat-shim listening'));
      const listen = new URL(String(start.listen));
      expect(await statusFor(listen, 'elsewhere.example.com')).toBe(200);

      // The operator names the realm's host in the config file, then reloads.
      const edited = JSON.parse(readFileSync(configFile, 'utf8')) as { server: Record<string, unknown> };
      edited.server.realmHosts = ['chat.example.com'];
      writeFileSync(configFile, JSON.stringify(edited, null, 2));
      expect(await reload(main)).toEqual({ code: 0, stderr: '' });
      const applied = await until('the reload', () => logLine(main, 'reload (SIGHUP): settings applied'));
      expect(applied).toMatchObject({ applied: ['server.realmHosts'] });
      expect(await statusFor(listen, 'elsewhere.example.com')).toBe(400);
      expect(await statusFor(listen, 'chat.example.com')).toBe(200);

      // A bad edit: the check fails with its one line, no SIGHUP is sent, the shim serves on as it was.
      writeFileSync(configFile, JSON.stringify({ server: { realmHosts: ['chat.example.com'], shutdownGraceMs: 'soon' } }));
      const refused = await reload(main);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toBe(
        `zulip-compat-shim: invalid configuration: server.shutdownGraceMs (config file ${configFile}): Invalid input: expected number, received string\n`,
      );
      expect(main.stdout.filter((l) => l.includes('reload (SIGHUP)'))).toHaveLength(1);
      expect(await statusFor(listen, 'elsewhere.example.com')).toBe(400);
      expect(main.child.exitCode).toBeNull();
    } finally {
      main.child.kill('SIGKILL');
    }
  });
});
