import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/**
 * The bench runs the shim and the synthetic upstream in child processes of their own (the
 * machine has two cores; the load driver must not share a thread with what it measures) and
 * talks to them over IPC: one `ready` message with the child's URL, then request/reply calls.
 */

export const BENCH_DIR = dirname(fileURLToPath(import.meta.url));
export const ROOT = resolve(BENCH_DIR, '..');

interface Request {
  id: number;
  cmd: string;
  args?: unknown;
}
interface Reply {
  id: number;
  ok: boolean;
  result?: unknown;
  error?: string;
}
interface Ready {
  type: 'ready';
  url: string;
}

export interface Child {
  proc: ChildProcess;
  url: string;
  call<T>(cmd: string, args?: unknown): Promise<T>;
  /** Asks the child to stop, and kills that one process if it does not within 10 s. */
  stop(): Promise<void>;
}

export interface SpawnOptions {
  /** Extra node flags (--expose-gc, --cpu-prof, …). */
  nodeArgs?: string[];
  env?: NodeJS.ProcessEnv;
  readyTimeoutMs?: number;
  /** The child's limit on open descriptors (`ulimit -n`, soft and hard), as a deployment sets it; default: this process's. */
  descriptors?: number;
}

/** The command that runs node with these arguments, under a descriptor limit when one is given. */
function nodeCommand(args: string[], descriptors: number | undefined): [string, string[]] {
  if (descriptors === undefined) return [process.execPath, args];
  // `exec` keeps the IPC channel (an inherited descriptor) and makes node the child itself.
  return ['/bin/sh', ['-c', 'ulimit -n "$0" && exec "$@"', String(descriptors), process.execPath, ...args]];
}

/**
 * How node runs a bench script: its bundle when ZCS_BUILT_DIR holds one (the test suite builds
 * them once, test/support/build.ts), else the source through tsx.
 */
export function scriptArgs(script: string): string[] {
  const built = process.env.ZCS_BUILT_DIR && join(process.env.ZCS_BUILT_DIR, 'bench', script.replace(/\.ts$/, '.js'));
  return built && existsSync(built) ? [built] : ['--import', 'tsx', resolve(BENCH_DIR, script)];
}

/**
 * Runs the bench's children as plain JavaScript, as the shim ships, not through tsx: the test
 * suite's bundles (test/support/build.ts) when ZCS_BUILT_DIR names them, else bundles of the
 * current source built here once (a second or two) into a directory removed at exit.
 */
export async function useBuiltChildren(): Promise<void> {
  if (process.env.ZCS_BUILT_DIR && existsSync(join(process.env.ZCS_BUILT_DIR, 'src', 'cli.js'))) return;
  // A specifier the test suite's bundler leaves alone: bundled, this module never gets here.
  const { buildChildScripts } = (await import(pathToFileURL(join(ROOT, 'test', 'support', 'build.ts')).href)) as {
    buildChildScripts(dir: string): Promise<void>;
  };
  const dir = mkdtempSync(join(tmpdir(), 'zcs-bench-built-'));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  await buildChildScripts(dir);
  process.env.ZCS_BUILT_DIR = dir;
}

/** The shim's CLI as plain JavaScript (see useBuiltChildren, called first). */
export function shippedCli(): string {
  const bundled = process.env.ZCS_BUILT_DIR && join(process.env.ZCS_BUILT_DIR, 'src', 'cli.js');
  if (!bundled || !existsSync(bundled)) throw new Error('the CLI is not built: call useBuiltChildren() first');
  return bundled;
}

export function spawnChild(script: string, args: string[], o: SpawnOptions = {}): Promise<Child> {
  const [command, commandArgs] = nodeCommand([...(o.nodeArgs ?? []), ...scriptArgs(script), ...args], o.descriptors);
  const proc = spawn(command, commandArgs, {
    cwd: ROOT,
    env: { ...process.env, ...o.env },
    // stdout (the shim's request log) is discarded; stderr shows crashes.
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  let nextId = 1;
  const waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  let exited = false;
  const exit = new Promise<void>((r) =>
    proc.once('exit', () => {
      exited = true;
      r();
    }),
  );

  return new Promise<Child>((resolveReady, rejectReady) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      rejectReady(new Error(`${script} did not start within ${o.readyTimeoutMs ?? 30_000} ms`));
    }, o.readyTimeoutMs ?? 30_000);
    proc.once('exit', (code) => {
      clearTimeout(timer);
      rejectReady(new Error(`${script} exited with code ${code} before it was ready`));
      for (const w of waiting.values()) w.reject(new Error(`${script} exited (code ${code})`));
      waiting.clear();
    });
    proc.on('message', (m: Reply | Ready) => {
      if ('type' in m && m.type === 'ready') {
        clearTimeout(timer);
        resolveReady({
          proc,
          url: m.url,
          call<T>(cmd: string, callArgs?: unknown) {
            if (exited) return Promise.reject(new Error(`${script} is not running`));
            const id = nextId++;
            return new Promise<T>((res, rej) => {
              waiting.set(id, { resolve: res as (v: unknown) => void, reject: rej });
              proc.send({ id, cmd, args: callArgs } satisfies Request);
            });
          },
          async stop() {
            if (exited) return;
            const id = nextId++;
            proc.send({ id, cmd: 'stop' } satisfies Request);
            const killer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
            await exit;
            clearTimeout(killer);
          },
        });
        return;
      }
      const r = m as Reply;
      const w = waiting.get(r.id);
      if (!w) return;
      waiting.delete(r.id);
      if (r.ok) w.resolve(r.result);
      else w.reject(new Error(r.error ?? 'child call failed'));
    });
  });
}

/** The child's side: announce the URL, then answer calls; `stop` runs `onStop` and exits. */
export function serveParent(url: string, handlers: Record<string, (args: unknown) => unknown>, onStop: () => Promise<void>): void {
  const send = (m: Reply | Ready) => process.send?.(m);
  process.on('message', (m: Request) => {
    if (m.cmd === 'stop') {
      void onStop().finally(() => process.exit(0));
      return;
    }
    const h = handlers[m.cmd];
    if (!h) return send({ id: m.id, ok: false, error: `unknown command ${m.cmd}` });
    Promise.resolve()
      .then(() => h(m.args))
      .then(
        (result) => send({ id: m.id, ok: true, result }),
        (e: unknown) => send({ id: m.id, ok: false, error: (e as Error).message }),
      );
  });
  // The bench went away: so does the child.
  process.on('disconnect', () => void onStop().finally(() => process.exit(0)));
  send({ type: 'ready', url });
}

/**
 * The shim's CLI (`cli`: this project's, built from the current source, or another
 * checkout's), logging at level info to a file, as a discarded stdout would take it: a pipe
 * read by this process would fill and hold the shim's log writes back while wrk runs
 * (spawnSync stops this process's event loop). Its URL once it logged its start-up line. `nodeArgs`: flags for node itself (`--cpu-prof`, …).
 */
export async function startCli(
  cli: string,
  upstream: string,
  o: { dir: string; nodeArgs?: string[]; args?: string[] },
): Promise<{ url: string; pid: number; stop(): Promise<void> }> {
  const args = [cli, '--upstream', upstream, '--port', '0', '--log-level', 'info', '--coalesce-ms', '5000', ...(o.args ?? [])];
  const name = `shim-${randomBytes(4).toString('hex')}`;
  const logFile = join(o.dir, `${name}.log`);
  const fd = openSync(logFile, 'w');
  const proc = spawn(process.execPath, [...(o.nodeArgs ?? []), ...args], { cwd: ROOT, stdio: ['ignore', fd, 'inherit'] });
  closeSync(fd);
  let exitedYet = false;
  const exited = new Promise<void>((r) =>
    proc.once('exit', () => {
      exitedYet = true;
      r();
    }),
  );
  const started = Date.now();
  let url: string | undefined;
  while (!url) {
    if (exitedYet) throw new Error(`the shim (${args.slice(1).join(' ')}) exited before it was ready`);
    if (Date.now() - started > 30_000) {
      proc.kill('SIGKILL');
      throw new Error(`the shim (${args.slice(1).join(' ')}) did not start within 30 s`);
    }
    await new Promise((r) => setTimeout(r, 100));
    const line = readFileSync(logFile, 'utf8')
      .split('\n')
      .find((l) => l.includes('"msg":"zulip-compat-shim listening"'));
    if (line) url = String((JSON.parse(line) as { listen: string }).listen);
  }
  return {
    url,
    pid: proc.pid!,
    async stop() {
      proc.kill('SIGTERM');
      const killer = setTimeout(() => proc.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(killer);
      rmSync(logFile, { force: true });
    },
  };
}
