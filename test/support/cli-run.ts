import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nodeArgsFor, ROOT } from './build.js';

/** Runs the CLI (src/cli.ts, bundled once per test run) as a child process and collects its output lines. */

export { ROOT };

export interface CliRun {
  child: ChildProcess;
  stdout: string[];
  stderr: string[];
  exited: Promise<number | null>;
}

/** The environment without any shim setting, so the machine's own cannot leak in. */
export function cleanEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const settings =
    /^(UPSTREAM_URL|REPLAY_HAR|RECORD_HAR|PORT|HOST|CONFIG_FILE|REDIS_URL|REDIS_SENTINELS|REDIS_SENTINEL_NAME|REDIS_CLUSTER|PRESENCE_.*|LOG_LEVEL|UPSTREAM_.*|REPLAY_STRICT|DEMO|SHUTDOWN_GRACE_MS|REALM_HOSTS|WORKERS|ADMIN_LISTEN|PUSH_RELAY_LISTEN|PUSH_BOUNCER_URL)$/;
  return { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !settings.test(k))), ...extra };
}

/**
 * `preload`: modules loaded with --import before the CLI (paths relative to the project, listed in build.ts).
 * `descriptors`: the process's limit on open descriptors (`ulimit -n`, soft and hard), as a deployment sets it.
 */
export function runCli(args: string[], o: { env?: NodeJS.ProcessEnv; preload?: string[]; descriptors?: number } = {}): CliRun {
  const node = [...nodeArgsFor('src/cli.ts', o.preload), ...args];
  // `exec`: the child is node itself, under the limit, and gets the signals tests send.
  const [command, commandArgs] =
    o.descriptors === undefined
      ? [process.execPath, node]
      : ['/bin/sh', ['-c', 'ulimit -n "$0" && exec "$@"', String(o.descriptors), process.execPath, ...node]];
  const child = spawn(command, commandArgs, { cwd: ROOT, env: cleanEnv(o.env) });
  const stdout: string[] = [];
  const stderr: string[] = [];
  let out = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
    const lines = out.split('\n');
    out = lines.pop()!;
    stdout.push(...lines);
  });
  child.stderr!.on('data', (d: Buffer) => stderr.push(d.toString()));
  const exited = new Promise<number | null>((r) =>
    child.on('close', (code) => {
      if (out) stdout.push(out);
      r(code);
    }),
  );
  return { child, stdout, stderr, exited };
}

/** The one line a start-up mistake leaves on stderr, after the run exited with code 2. */
export async function oneErrorLine(run: CliRun): Promise<string> {
  const code = await run.exited;
  const lines = run.stderr.join('').trimEnd().split('\n');
  if (code !== 2 || lines.length !== 1) throw new Error(`expected exit 2 and one line, got ${code}: ${run.stderr.join('')}`);
  return lines[0]!;
}

export async function until<T>(what: string, f: () => T | undefined, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The first JSON log line whose msg matches. */
export function logLine(run: CliRun, msg: string | RegExp): Record<string, unknown> | undefined {
  for (const line of run.stdout) {
    try {
      const o = JSON.parse(line) as Record<string, unknown>;
      if (typeof o.msg === 'string' && (typeof msg === 'string' ? o.msg === msg : msg.test(o.msg))) return o;
    } catch {
      // not a log line
    }
  }
  return undefined;
}

/**
 * The CLI serving `upstream` in a child process (its request log off), once it listens: its URL,
 * and `stop`, which kills it. `config`: a configuration file's content; `descriptors`: as runCli.
 */
export async function serveCli(
  upstream: string,
  o: { descriptors?: number; config?: object } = {},
): Promise<{ url: string; run: CliRun; stop(): Promise<void> }> {
  const dir = o.config ? mkdtempSync(join(tmpdir(), 'zcs-cli-')) : undefined;
  const configArgs = dir ? ['--config', join(dir, 'config.json')] : [];
  if (dir) writeFileSync(join(dir, 'config.json'), JSON.stringify(o.config));
  const args = ['--upstream', upstream, '--port', '0', '--log-level', 'info', '--access-log', 'off', ...configArgs];
  const run = runCli(args, o.descriptors === undefined ? {} : { descriptors: o.descriptors });
  const stop = async () => {
    run.child.kill('SIGKILL');
    await run.exited;
    if (dir) rmSync(dir, { recursive: true, force: true });
  };
  try {
    const start = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
    return { url: String(start.listen), run, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}
