import { parseArgs } from 'node:util';
import { ConfigError } from './errors.js';
import { DEFAULT_FILE, DEFAULT_SOURCE, readJson, valueAt } from './files.js';

/** The settings as flags and variables (the contract's Interface table), `--help`, and the settings removed. */

type Kind = 'string' | 'int' | 'bool' | 'list';
/** An option as `--help` lists it: its argument, one line, and the variable that sets it too. */
interface HelpLine {
  flag: string;
  arg?: string;
  help: string;
  env?: string;
  /** A one-letter alias (`-x`). */
  short?: string;
}

export interface Setting extends HelpLine {
  path: [string, string];
  env: string;
  kind: Kind;
  /** `--help` follows the line with config/default.json's value. */
  withDefault?: true;
}

/** The Interface table of the contract, one row per setting, in the order `--help` lists them. */
// biome-ignore format: a table, one row per setting
export const SETTINGS: Setting[] = [
  { flag: 'upstream', env: 'UPSTREAM_URL', path: ['upstream', 'url'], kind: 'string', arg: 'URL', help: 'the old Zulip server (http or https)' },
  { flag: 'replay', env: 'REPLAY_HAR', path: ['replay', 'har'], kind: 'string', arg: 'FILE.har', help: 'use a recorded HAR as the upstream' },
  { flag: 'demo', env: 'DEMO', path: ['replay', 'demo'], kind: 'bool', help: 'replay the bundled Zulip 2.1 recording' },
  { flag: 'record', env: 'RECORD_HAR', path: ['record', 'har'], kind: 'string', arg: 'FILE.har', help: 'record every upstream exchange, redacted' },
  { flag: 'port', env: 'PORT', path: ['server', 'port'], kind: 'int', arg: 'N', help: 'listen port', withDefault: true },
  { flag: 'host', env: 'HOST', path: ['server', 'host'], kind: 'string', arg: 'H', help: 'listen address', withDefault: true },
  { flag: 'redis', env: 'REDIS_URL', path: ['store', 'redisUrl'], kind: 'string', arg: 'URL', help: 'share state between replicas through Redis' },
  { flag: 'redis-sentinels', env: 'REDIS_SENTINELS', path: ['store', 'redisSentinels'], kind: 'string', arg: 'LIST', help: 'or through the primary these Sentinels name' },
  { flag: 'redis-sentinel-name', env: 'REDIS_SENTINEL_NAME', path: ['store', 'redisSentinelName'], kind: 'string', arg: 'N', help: "the Sentinels' name for that primary" },
  { flag: 'redis-cluster', env: 'REDIS_CLUSTER', path: ['store', 'redisCluster'], kind: 'string', arg: 'LIST', help: 'or through a Redis Cluster (host:port,…)' },
  { flag: 'coalesce-ms', env: 'PRESENCE_COALESCE_MS', path: ['presence', 'coalesceMs'], kind: 'int', arg: 'N', help: 'one full presence fetch per realm per N ms' },
  { flag: 'share-snapshots', env: 'PRESENCE_SHARE_SNAPSHOTS', path: ['presence', 'shareSnapshots'], kind: 'string', arg: 'MODE', help: 'auto | always | never' },
  { flag: 'log-level', env: 'LOG_LEVEL', path: ['log', 'level'], kind: 'string', arg: 'L', help: 'pino level', withDefault: true },
  { flag: 'access-log', env: 'ACCESS_LOG', path: ['log', 'access'], kind: 'string', arg: 'on|off', help: 'one line per request', withDefault: true },
  { flag: 'upstream-timeout-ms', env: 'UPSTREAM_TIMEOUT_MS', path: ['upstream', 'timeoutMs'], kind: 'int', arg: 'N', help: '504 after N ms of upstream silence' },
  { flag: 'replay-strict', env: 'REPLAY_STRICT', path: ['replay', 'strict'], kind: 'bool', help: 'a replay miss fails the process at shutdown' },
  { flag: 'insecure-upstream-tls', env: 'UPSTREAM_INSECURE_TLS', path: ['upstream', 'insecureTls'], kind: 'bool', help: 'accept self-signed upstream certificates' },
  { flag: 'shutdown-grace-ms', env: 'SHUTDOWN_GRACE_MS', path: ['server', 'shutdownGraceMs'], kind: 'int', arg: 'N', help: 'drain deadline on SIGTERM/SIGINT' },
  { flag: 'realm-hosts', env: 'REALM_HOSTS', path: ['server', 'realmHosts'], kind: 'list', arg: 'LIST', help: 'admit only these Host names (*. wildcards)' },
  { flag: 'trust-proxy', env: 'TRUST_PROXY', path: ['server', 'trustProxy'], kind: 'list', arg: 'CIDRS', help: 'keep X-Forwarded-Host/Proto from these peers' },
  { flag: 'app-feature-level', env: 'APP_FEATURE_LEVEL', path: ['app', 'featureLevel'], kind: 'int', arg: 'N', help: 'the feature level the mobile app is shown' },
  { flag: 'admin-listen', env: 'ADMIN_LISTEN', path: ['server', 'adminListen'], kind: 'string', arg: 'HOST:PORT', help: 'serve /healthz, /readyz, /metrics there only' },
  { flag: 'push-relay-listen', env: 'PUSH_RELAY_LISTEN', path: ['push', 'relayListen'], kind: 'string', arg: 'ADDR', help: "HOST:PORT of a push relay for the server" },
  { flag: 'push-bouncer-url', env: 'PUSH_BOUNCER_URL', path: ['push', 'bouncerUrl'], kind: 'string', arg: 'URL', help: 'the push bouncer the relay forwards to' },
];

/**
 * Settings the shim no longer has, each with what to do instead. Given as a flag, a variable, a
 * config file's key or an embedding option, one stops the shim with a line saying so, where an
 * unknown setting would only suggest a spelling.
 */
export interface RemovedSetting {
  path: [string, string];
  flag: string;
  env: string;
  instead: string;
}

export const REMOVED_SETTINGS: readonly RemovedSetting[] = [
  {
    path: ['server', 'workers'],
    flag: 'workers',
    env: 'WORKERS',
    instead:
      'the shim runs as one process; to use more cores, run several replicas on one Redis, each on its own port, behind your load balancer (docs/deployment.md, "Several replicas on one host")',
  },
];

/** The one line for a removed setting, naming it and where it was given. */
export function removedError(r: RemovedSetting, source: string): ConfigError {
  return new ConfigError(`${r.path.join('.')} (${source}): removed: ${r.instead}`);
}

export function coerce(s: Setting, raw: string | boolean, source: string): unknown {
  const name = `${s.path.join('.')} (${source})`;
  if (s.kind === 'bool') {
    if (typeof raw === 'boolean') return raw;
    if (/^(1|true|yes|on)$/i.test(raw)) return true;
    if (/^(0|false|no|off|)$/i.test(raw)) return false;
    throw new ConfigError(`${name}: expected true or false, got ${JSON.stringify(raw)}`);
  }
  const text = String(raw);
  if (s.kind === 'int') {
    // A sign is accepted here so that the schema, not this parser, words a range error.
    if (!/^-?\d+$/.test(text.trim())) throw new ConfigError(`${name}: expected a whole number, got ${JSON.stringify(text)}`);
    return Number(text.trim());
  }
  if (s.kind === 'list') return text.split(',').flatMap((x) => (x.trim() === '' ? [] : [x.trim()]));
  return text;
}

const CONFIG_LINE: HelpLine = { flag: 'config', arg: 'FILE', help: 'a JSON config file', env: 'CONFIG_FILE' };
const INFO_LINES: readonly HelpLine[] = [
  { flag: 'healthcheck', help: 'ask GET /healthz of the shim so configured: exit 0 or 1' },
  {
    flag: 'check',
    help: "check the configuration, the upstream, the store and a push\nrelay's bouncer, say what was found, and exit: 0 when all\nanswer, 2 when not",
  },
  {
    flag: 'check=config',
    help: 'check the configuration alone (file, flags, environment),\nno network: exit 0 when valid, 2 when not',
  },
  { flag: 'version', help: 'print the version and exit' },
  { flag: 'help', help: 'print this help and exit' },
];

/** What `--help` lists, in order: the settings (`--config` after where to listen), then the options that only ask. */
const HELP_LINES: ReadonlyArray<HelpLine | Setting> = [
  ...SETTINGS.flatMap((s) => (s.flag === 'host' ? [s, CONFIG_LINE] : [s])),
  ...INFO_LINES,
];

/** The `--help` text: HELP_LINES in columns, each setting with its variable (and default). */
export function usage(): string {
  const defaults = readJson(DEFAULT_FILE, DEFAULT_SOURCE);
  const indent = ' '.repeat(28);
  const lines = HELP_LINES.map((line) => {
    const { flag, arg, help, env } = line;
    const short = line.short ?? INFO_OPTIONS[flag as keyof typeof INFO_OPTIONS]?.short;
    const left = `${short ? `-${short}, ` : ''}--${flag}${arg ? ` ${arg}` : ''}`;
    const shown = 'path' in line && line.withDefault ? `${help} (default ${String(valueAt(defaults, line.path))})` : help;
    const [first, ...more] = shown.split('\n');
    return [`  ${left.padEnd(26)}${env ? `${first!.padEnd(46)}[${env}]` : first}`, ...more.map((m) => `${indent}${m}`)].join('\n');
  });
  return `Usage: zulip-compat-shim [options]

${lines.join('\n')}

One of --upstream, --replay or --demo is required. Every key: README "Configuration reference".
`;
}

export const INFO_OPTIONS = { help: { type: 'boolean', short: 'h' }, version: { type: 'boolean', short: 'v' } } as const;

/** `--help` or `--version` anywhere among the arguments: answered before any configuration is read. */
export function infoRequest(argv: string[]): 'help' | 'version' | undefined {
  const { values } = parseArgs({ args: argv, options: INFO_OPTIONS, strict: false, allowPositionals: true });
  return values.help === true ? 'help' : values.version === true ? 'version' : undefined;
}

/**
 * A value option followed by something that starts with `-` (`--port -1`) takes it as its
 * value, as getopt does, so the schema words the error instead of Node's argument parser.
 */
export function joinDashValues(argv: string[], valued: Set<string>): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const next = argv[i + 1];
    if (valued.has(a) && next?.startsWith('-')) {
      out.push(`${a}=${next}`);
      i++;
    } else out.push(a);
  }
  return out;
}
