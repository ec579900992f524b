import { accessSync, constants } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { createLogger, type Logger } from './observability/logger.js';
import { appProbe, probeBouncer, probeStore, probeUpstream, riskySetups, warnAtStartup, type Probe } from './checks.js';
import { ConfigError, envNearMisses, loadConfig, memoryBound, namedKey, oneLine, parseListenAddress, type Config } from './config/index.js';
import { loggableUrl, logStartup } from './observability/startup.js';
import { openShim, type OpenedShim } from './embed.js';
import { directUpstream, openUpstream, type UpstreamTarget } from './open-upstream.js';
import { tuneRuntime } from './runtime.js';
import type { Shim } from './server.js';
import { createMetrics } from './observability/metrics.js';
import { createStore } from './store/create.js';
import { HeldSignals } from './signals.js';
import { realmOf } from './upstream/realm.js';
import { VERSION } from './version.js';

/**
 * What the CLI (cli.ts) runs once it is asked to serve or to check: loaded only then, so
 * `--healthcheck` (the image's, every 30 s), `--version` and `--help` load the configuration's
 * module alone. A configuration failure is thrown as a ConfigError for the CLI to say in one
 * line (exit 2).
 */

/** A listener besides the public one, by the key that names its `HOST:PORT`. */
type SideListener = 'server.adminListen' | 'push.relayListen';

const addressAt = (config: Config, key: SideListener): string | undefined =>
  key === 'server.adminListen' ? config.server.adminListen : config.push.relayListen;

/**
 * Why listening failed, in one line that names the key and where its value came from: the
 * public listener's (`server.port`, `server.host`) or, with `side`, that listener's key.
 */
function listenFailure(e: unknown, config: Config, sources: ReadonlyMap<string, string>, side?: SideListener): ConfigError | undefined {
  const code = (e as NodeJS.ErrnoException).code;
  const address = side && addressAt(config, side);
  const { port, host } = address ? parseListenAddress(address) : config.server;
  const portKey = namedKey(side ?? 'server.port', sources, 'default');
  const hostKey = side ? portKey : namedKey('server.host', sources, 'default');
  switch (code) {
    case 'EADDRINUSE':
      return new ConfigError(`${portKey}: port ${port} on ${host} is already in use`);
    case 'EACCES':
      return new ConfigError(`${portKey}: no permission to listen on port ${port} (ports below 1024 need privileges)`);
    case 'EADDRNOTAVAIL':
      return new ConfigError(`${hostKey}: ${host} is not an address of this machine`);
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_FAIL':
    case 'EAI_NONAME':
      return new ConfigError(`${hostKey}: ${host} is not an address or a host name this machine can resolve`);
    case 'EINVAL':
    case 'ERR_SOCKET_BAD_PORT':
      return new ConfigError(`${hostKey}: cannot listen on ${host} port ${port}`);
    default:
      return undefined;
  }
}

function nearMissLine(name: string, meant: string): string {
  return `environment: ${name} is set but is no setting of the shim's (did you mean ${meant}?)`;
}

/** One warning per environment variable that is a near miss of a setting's (`PROT` for `PORT`). */
function warnNearMisses(log: Logger): void {
  for (const { name, meant } of envNearMisses(process.env)) {
    log.warn({ variable: name, meant }, nearMissLine(name, meant));
  }
}

/** Exit code after an uncaught exception (EX_SOFTWARE), for a supervisor to restart the shim. */
export const EXIT_UNCAUGHT = 70;

/**
 * E4's last line (SECURITY.md). Every request path answers its own errors; what still escapes
 * is a bug whose effect on this process is unknown. An uncaught exception is logged, the shim
 * closes as on SIGTERM and exits 70 for the supervisor to restart it (ids survive a restart,
 * P5). An unhandled rejection had nobody waiting on it: it is logged and serving goes on.
 */
function handleEscapedErrors(log: Logger, onUncaught: () => void): void {
  process.on('uncaughtException', (err) => {
    log.fatal({ err }, 'uncaught exception: closing, then exiting for a restart');
    onUncaught();
  });
  process.on('unhandledRejection', (reason) => {
    log.error({ err: reason }, 'unhandled promise rejection: logged, serving goes on');
  });
}

/**
 * X9: SIGHUP. The configuration is read again from the same flags, environment and file; what
 * can change while serving is applied, what cannot is logged and kept until a restart, and a
 * configuration that no longer validates is logged and changes nothing.
 */
function reload(argv: string[], shim: Shim, log: Logger): void {
  let next: Config;
  try {
    next = loadConfig(argv).config;
  } catch (e) {
    log.error({ err: { message: (e as Error).message } }, 'reload (SIGHUP): the configuration is not valid; nothing changed');
    return;
  }
  const { applied, kept } = shim.reload(next);
  if (kept.length > 0) log.warn({ keys: kept }, 'reload (SIGHUP): these settings change only with a restart; kept as they were');
  log.info({ applied }, applied.length ? 'reload (SIGHUP): settings applied' : 'reload (SIGHUP): nothing to change');
}

/**
 * What `--check` asks for: `all` (the configuration, the upstream and the store) or `config`
 * (`--check=config`: the file, flags and environment alone, no network; systemd's ExecStartPre=
 * and ExecReload= run it, so a bad edit is refused before the service is touched). Returns the
 * arguments without the `--check` flags.
 */
export function checkMode(argv: readonly string[]): { mode: 'all' | 'config'; rest: string[] } {
  const isCheck = (a: string) => a === '--check' || a.startsWith('--check=');
  let mode: 'all' | 'config' = 'all';
  for (const a of argv.filter(isCheck)) {
    const value = a === '--check' ? 'all' : a.slice('--check='.length);
    if (value !== 'all' && value !== 'config') {
      throw new ConfigError(`${a}: unknown check (give --check for everything, or --check=config for the configuration alone)`);
    }
    mode = value;
  }
  return { mode, rest: argv.filter((a) => !isCheck(a)) };
}

/**
 * `--check=config`'s part of what opening the upstream would refuse, without opening anything:
 * a recording needs a server to record, a replay's file must be readable, a recording's
 * directory writable. Throws the ConfigError a start would.
 */
function checkFiles(config: Config, sources: ReadonlyMap<string, string>): void {
  const recordKey = namedKey('record.har', sources, '--record');
  const record = config.record.har;
  if (record && !config.upstream.url) {
    throw new ConfigError(`${recordKey}: recording needs --upstream URL${config.replay.har ? ', not with --replay' : ''}`);
  }
  const can = (file: string, mode: number) => {
    try {
      accessSync(file, mode);
      return undefined;
    } catch (e) {
      return (e as NodeJS.ErrnoException).code ?? 'error';
    }
  };
  const har = config.replay.har && resolve(config.replay.har);
  const unreadable = har ? can(har, constants.R_OK) : undefined;
  if (har && unreadable) throw new ConfigError(`${namedKey('replay.har', sources, '--replay')}: cannot read ${har} (${unreadable})`);
  const dir = record && dirname(resolve(record));
  const unwritable = dir ? can(dir, constants.W_OK) : undefined;
  if (record && unwritable) throw new ConfigError(`${recordKey}: cannot write ${resolve(record)} (${unwritable})`);
}

/**
 * `--check` (as `nginx -t`): the configuration as the shim would start with it, then the
 * upstream's `server_settings` (its version, feature level and realm) and the store, each said
 * in one line; exit 0 when everything answered, 2 when not. Nothing listens. `--check=config`
 * stops after the configuration: exit 0 when it is valid.
 */
export async function check(argv: string[]): Promise<number> {
  const say = (line: string) => process.stdout.write(`zulip-compat-shim: check: ${line}\n`);
  const { mode, rest } = checkMode(argv);
  // A ConfigError goes to the caller, which says it in one line (exit 2).
  const { config, sources } = loadConfig(rest);
  if (mode === 'config') checkFiles(config, sources);
  say('configuration: valid');
  // Near misses and risky set-ups are worth a line, but they fail nothing: the variable may be
  // meant for another program, the set-up may be what the operator wants.
  for (const { name, meant } of envNearMisses(process.env)) say(nearMissLine(name, meant));
  for (const w of riskySetups(config, sources)) say(`warning: ${w}`);
  if (mode === 'config') return 0;
  const log = createLogger('silent');
  let upstream: UpstreamTarget | undefined;
  let found: Probe;
  try {
    // The upstream itself, also where the shim would record it: a check writes no recording.
    const url = config.upstream.url;
    upstream = url ? directUpstream(url) : await openUpstream(config, log, new Map());
    found = await probeUpstream(upstream.target, upstream.describe, { insecureTls: config.upstream.insecureTls });
  } catch (e) {
    found = { ok: false, line: `upstream ${config.upstream.url ?? ''}: does not answer (${oneLine((e as Error).message)})` };
  } finally {
    await upstream?.close();
  }
  say(found.line);
  const app = appProbe(config.app.featureLevel, found.featureLevel);
  if (app) say(app.line);
  const store = createStore(config, log, createMetrics());
  const stored = await probeStore(store);
  await store.close().catch(() => undefined);
  say(stored.line);
  // M7: the bouncer the push relay forwards to, where there is a relay.
  const bouncer = config.push.relayListen ? await probeBouncer(config.push.bouncerUrl) : undefined;
  if (bouncer) say(bouncer.line);
  const ok = found.ok && stored.ok && (app?.ok ?? true) && (bouncer?.ok ?? true);
  return ok ? 0 : 2;
}

/**
 * Serves with the configuration loaded from `argv`; resolves to the exit code once stopped.
 * `signals` are taken from the caller's first moment (the CLI's), else from here on.
 */
export async function serve(argv: string[], signals: HeldSignals = new HeldSignals()): Promise<number> {
  try {
    return await serveWith(argv, signals);
  } finally {
    signals.release();
  }
}

/** Listens on the public address, then the admin and push relay listeners; a failure as the one line naming its key. */
async function listenAll(opened: OpenedShim, config: Config, sources: ReadonlyMap<string, string>) {
  const { shim } = opened;
  let listening: SideListener | undefined;
  try {
    const { url } = await shim.listen();
    listening = 'server.adminListen';
    const adminUrl = (await shim.listenAdmin())?.url;
    listening = 'push.relayListen';
    const pushRelayUrl = (await shim.listenPushRelay())?.url;
    return { url, adminUrl, pushRelayUrl };
  } catch (e) {
    const failure = listenFailure(e, config, sources, listening);
    if (!failure) throw e;
    await opened.close();
    throw failure;
  }
}

/**
 * The start-up line (not awaited: it waits briefly for the upstream's feature level while
 * serving goes on), and what --check would fail on, one warning each (not awaited either). A
 * replay is not asked (it answers in recorded order). Resolves with the app's probe (M1).
 */
function announce(log: Logger, config: Config, opened: OpenedShim, urls: Awaited<ReturnType<typeof listenAll>>) {
  const { shim, upstream } = opened;
  const { url, adminUrl, pushRelayUrl } = urls;
  const facts = { version: VERSION, upstream: upstream.describe, store: shim.context.store.kind, listen: url };
  const sides = {
    ...(adminUrl ? { admin: adminUrl } : {}),
    ...(pushRelayUrl ? { pushRelay: pushRelayUrl, bouncer: config.push.bouncerUrl } : {}),
  };
  void logStartup(log, { ...facts, ...sides }, () => shim.context.featureLevels.featureLevel(realmOf(upstream.upstreamId, {})));
  const upstreamUrl = config.upstream.url;
  return warnAtStartup(
    log,
    {
      ...(upstreamUrl
        ? { upstream: () => probeUpstream(upstreamUrl, loggableUrl(upstreamUrl), { insecureTls: config.upstream.insecureTls }) }
        : {}),
      store: () => probeStore(shim.context.store),
      ...(config.push.relayListen ? { bouncer: () => probeBouncer(config.push.bouncerUrl) } : {}),
    },
    config.app.featureLevel,
  );
}

/**
 * Serves until a signal (or an uncaught exception, or an app level the upstream cannot be served
 * at) stops it; resolves to the exit code once closed.
 */
function untilStopped(
  argv: string[],
  signals: HeldSignals,
  log: Logger,
  opened: OpenedShim,
  appChecked: Promise<Probe | undefined>,
  setUncaught: (onUncaught: () => void) => void,
): Promise<number> {
  const { shim, upstream } = opened;
  return new Promise<number>((done) => {
    let stopping = false;
    const stop = (signal: string, exitCode?: number) => {
      if (stopping) return;
      stopping = true;
      log.info({ signal }, 'shutting down');
      // After an uncaught exception, closing itself may hang: exit regardless in the end.
      if (exitCode !== undefined) setTimeout(() => done(exitCode), shim.settings.shutdownGraceMs + 2_000);
      void opened.close().then(
        () => {
          // H2 strict mode: every miss on stderr, one line each, and a failing exit code.
          const misses = upstream.strictMisses();
          for (const m of misses) process.stderr.write(`zulip-compat-shim: replay miss: ${m}\n`);
          done(exitCode ?? (misses.length ? 1 : 0));
        },
        (e) => {
          log.error({ err: e }, 'error during shutdown');
          done(exitCode ?? 1);
        },
      );
    };
    setUncaught(() => stop('uncaughtException', EXIT_UNCAUGHT));
    // M1: an --app-feature-level the upstream's real level cannot be served at is a start-up
    // error (exit 2), once the upstream has said its level (an upstream that does not answer yet
    // is not judged).
    void appChecked.then((app) => {
      if (!app || app.ok) return;
      process.stderr.write(`zulip-compat-shim: ${app.line}\n`);
      stop('app.featureLevel', 2);
    });
    // X9: SIGTERM and SIGINT drain (stop accepting, finish in-flight requests up to the
    // deadline); SIGHUP reloads the configuration without dropping a connection, as nginx does.
    // One that came while the shim was starting is acted on now.
    signals.handTo((signal) => (signal === 'SIGHUP' ? reload(argv, shim, log) : stop(signal)));
  });
}

/** X2 at start-up: what the byte budgets bound, and how far the JavaScript heap may grow above live data. */
function sayMemory(log: Logger, config: Config, tuning: ReturnType<typeof tuneRuntime>): void {
  const budgets = memoryBound(config.memory);
  log.info(
    { memoryBudgetsMiB: Math.round(budgets / 2 ** 20), heapGrowingPercent: tuning.heapGrowingPercent },
    tuning.heapGrowingPercent === 'operator'
      ? "memory: the byte budgets bound what the shim keeps (X2); the JavaScript heap grows as node's --heap-growing-percent says"
      : `memory: the byte budgets bound what the shim keeps (X2); the JavaScript heap may grow ${tuning.heapGrowingPercent}% above live data between collections (node's --heap-growing-percent sets another)`,
  );
}

async function serveWith(argv: string[], signals: HeldSignals): Promise<number> {
  const { config, sources } = loadConfig(argv);
  const log = createLogger(config.log.level);
  warnNearMisses(log);
  for (const line of riskySetups(config, sources)) log.warn(line);
  sayMemory(log, config, tuneRuntime());
  // Until the shim is up there is nothing to close: exit at once.
  let onUncaught: () => void = () => process.exit(EXIT_UNCAUGHT);
  handleEscapedErrors(log, () => onUncaught());
  // A ConfigError (an unreadable HAR file, say) goes to the caller, which says it in one line.
  const opened = await openShim({ config, log, sources });
  if (config.upstream.insecureTls) log.warn('upstream TLS certificates are NOT verified (--insecure-upstream-tls)');
  const urls = await listenAll(opened, config, sources);
  if (opened.upstream.announce) process.stdout.write(opened.upstream.announce(urls.url));
  const appChecked = announce(log, config, opened, urls);
  return untilStopped(argv, signals, log, opened, appChecked, (f) => {
    onUncaught = f;
  });
}
