import type { z } from 'zod';
import { ConfigError } from './errors.js';
import { REMOVED_SETTINGS, removedError, SETTINGS } from './flags.js';
import { configSchema } from './schema.js';

/**
 * What makes a configuration error one clear line: the key and where its value came from, and
 * the spelling likely meant (a flag, a variable, a key) where the one given is unknown.
 */

/** The closest of `known` to `key` within two edits: the likely intended spelling. */
export function closest(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = 3;
  for (const k of known) {
    const d = editDistance(key.toLowerCase(), k.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [k, d];
  }
  return best;
}

/**
 * Edits (insert, delete, replace, or swap two neighbours: `prot` is one from `port`) that turn
 * `a` into `b`; the optimal-string-alignment distance.
 */
export function editDistance(a: string, b: string): number {
  let before: number[] = [];
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      let d = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, before[j - 2]! + 1);
      next[j] = d;
    }
    [before, row] = [row, next];
  }
  return row[b.length]!;
}

/** The environment variables the shim reads: every setting's, and CONFIG_FILE. */
export function knownEnvNames(): string[] {
  return [...SETTINGS.map((s) => s.env), 'CONFIG_FILE'];
}

/** Variables of the system, the shell or the tools around the shim: never taken for a misspelt setting. */
const COMMON_ENV = new Set([
  '_',
  'PATH',
  'HOME',
  'HOSTNAME',
  'HOSTTYPE',
  'PWD',
  'OLDPWD',
  'TERM',
  'USER',
  'USERNAME',
  'LOGNAME',
  'SHELL',
  'SHLVL',
  'LANG',
  'LANGUAGE',
  'MAIL',
  'TZ',
  'TMPDIR',
  'TEMP',
  'TMP',
  'EDITOR',
  'PAGER',
  'DISPLAY',
  'COLUMNS',
  'LINES',
  'INIT_CWD',
  'COLORTERM',
]);
const COMMON_ENV_PREFIXES = ['NODE_', 'npm_', 'LC_', 'XDG_', 'SSH_', 'DBUS_', 'SYSTEMD_', 'INVOCATION_ID', 'JOURNAL_STREAM', 'VITEST'];

/** A setting's name as compared for near misses: no underscores, upper case. */
const folded = (name: string) => name.replace(/_/g, '').toUpperCase();

/**
 * Variables whose silent miss changes what the shim lets through: a trust-proxy miss makes
 * Zulip take browsers' calls for plain HTTP (the CSRF 403) and names the proxy as every
 * client; a realm-hosts miss admits any Host. Their near misses are looked for more widely.
 */
const SECURITY_ENV: ReadonlySet<string> = new Set(['TRUST_PROXY', 'REALM_HOSTS']);

/**
 * A name's words without their endings (`TRUSTED_PROXIES` → `TRUSTPROXY`, `REALM_HOST` →
 * `REALMHOST`), folded: how other programs spell the same setting (Laravel's TRUSTED_PROXIES).
 */
const stemmed = (name: string) =>
  name
    .toUpperCase()
    .split('_')
    .map((w) => (w.length > 4 ? w.replace(/IES$/, 'Y').replace(/(ED|S)$/, '') : w))
    .join('');

/**
 * The known variable a name that is none is a near miss of, if any: the same once underscores
 * are dropped and case is folded (`LOGLEVEL`, `log_level`), one edit away (`PROT`, two for names
 * of 8 characters or more), or the known name without its last `_URL`, `_MS` or `_HAR` segment
 * (`REDIS`, `UPSTREAM`). For the settings whose miss changes security (SECURITY_ENV), also two
 * edits from the name with its words' endings dropped (`TRUST_PROXIES`, `TRUSTED_PROXIES`).
 */
export function envNearMiss(name: string, known: readonly string[] = knownEnvNames()): string | undefined {
  if (known.includes(name) || COMMON_ENV.has(name) || COMMON_ENV_PREFIXES.some((p) => name.startsWith(p))) return undefined;
  const given = folded(name);
  if (given === '') return undefined;
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const k of known) {
    const stem = /^(.+)_(URL|MS|HAR)$/.exec(k)?.[1];
    const target = folded(k);
    let d = stem !== undefined && folded(stem) === given ? 0 : editDistance(given, target);
    if (SECURITY_ENV.has(k)) d = Math.min(d, editDistance(stemmed(name), stemmed(k)));
    if (d <= (target.length >= 8 ? 2 : 1) && d < bestDistance) [best, bestDistance] = [k, d];
  }
  return best;
}

/** Every variable of `env` (set, not empty) that is a near miss of a setting's, with the one likely meant. */
export function envNearMisses(env: NodeJS.ProcessEnv): Array<{ name: string; meant: string }> {
  const known = knownEnvNames();
  return Object.keys(env)
    .filter((name) => env[name])
    .flatMap((name) => {
      const meant = envNearMiss(name, known);
      return meant ? [{ name, meant }] : [];
    });
}

/** A removed setting among the keys the schema did not know (a config file's, the options'), as its one line. */
export function removedKeyError(issues: readonly z.core.$ZodIssue[], sources: ReadonlyMap<string, string>): ConfigError | undefined {
  for (const issue of issues) {
    if (issue.code !== 'unrecognized_keys') continue;
    const at = issue.path.map(String).join('.');
    for (const key of issue.keys) {
      const removed = REMOVED_SETTINGS.find((r) => r.path.join('.') === `${at}.${key}`);
      if (removed) return removedError(removed, sources.get(`${at}.${key}`) ?? 'config file');
    }
  }
  return undefined;
}

/** One line for the first schema problem, naming the key and where its value came from. */
export function describeIssue(issue: z.core.$ZodIssue, sources: ReadonlyMap<string, string>): string {
  const at = issue.path.map(String);
  if (issue.code === 'unrecognized_keys') {
    const key = [...at, issue.keys[0]!].join('.');
    const hint = closest(issue.keys[0]!, Object.keys(shapeAt(at)));
    return `${namedKey(key, sources, 'config file')}: unknown key${hint ? ` (did you mean ${[...at, hint].join('.')}?)` : ''}`;
  }
  const key = at.join('.');
  const source = sourceOf(at, sources);
  return `${key || 'config'}${source ? ` (${source})` : ''}: ${issue.message}`;
}

/** `key (where its value came from)`, the way every configuration error names a key. */
export function namedKey(key: string, sources: ReadonlyMap<string, string>, otherwise: string): string {
  return `${key} (${sources.get(key) ?? otherwise})`;
}

/** Where a key's value came from; a missing key or an array element is blamed on its parent's. */
function sourceOf(path: string[], sources: ReadonlyMap<string, string>): string | undefined {
  for (let n = path.length; n > 0; n--) {
    const s = sources.get(path.slice(0, n).join('.'));
    if (s) return s;
  }
  return undefined;
}

/** The keys the schema knows at a key path (for the spelling hint of an unknown key). */
function shapeAt(path: string[]): Record<string, unknown> {
  let shape: Record<string, unknown> | undefined = configSchema.shape;
  for (const p of path) shape = (shape?.[p] as { shape?: Record<string, unknown> } | undefined)?.shape;
  return shape ?? {};
}

/**
 * The one line for arguments Node's parser refused: an unknown option with the flag likely meant
 * (read as a variable first: --redis-url as REDIS_URL, --upstream-timeout as UPSTREAM_TIMEOUT,
 * the near misses of the environment apply; else the closest of `options`), a removed one with
 * what to do instead.
 */
export function flagError(e: unknown, options: readonly string[]): ConfigError {
  const given =
    (e as NodeJS.ErrnoException).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? /'(-[^']*)'/.exec((e as Error).message)?.[1] : undefined;
  if (!given) return new ConfigError((e as Error).message.split('\n')[0] ?? 'invalid arguments');
  const name = given.replace(/^-+/, '').split('=')[0]!;
  const removed = given.startsWith('--') ? REMOVED_SETTINGS.find((r) => r.flag === name) : undefined;
  if (removed) return removedError(removed, `--${name}`);
  const asEnv = name.toUpperCase().replace(/-/g, '_');
  const env = knownEnvNames().includes(asEnv) ? asEnv : envNearMiss(asEnv);
  const byEnv = env === 'CONFIG_FILE' ? 'config' : SETTINGS.find((x) => x.env === env)?.flag;
  const hint = byEnv ?? closest(name, [...options, 'check', 'healthcheck']);
  return new ConfigError(`${given}: unknown option${hint ? ` (did you mean --${hint}?)` : ''}`);
}

/** No upstream given: the one line, naming a near miss in the environment (UPSTREAM=, UPSTREM_URL=, REPLAY=), the usual cause. */
export function noUpstreamError(env: NodeJS.ProcessEnv): ConfigError {
  const known = new Set(SETTINGS.map((s) => s.env));
  const upstreamVariables = ['UPSTREAM_URL', 'REPLAY_HAR', 'DEMO'];
  const nearMiss =
    envNearMisses(env).find((m) => upstreamVariables.includes(m.meant)) ??
    Object.keys(env)
      .filter((k) => /^UPSTREAM/i.test(k) && !known.has(k) && env[k])
      .map((name) => ({ name, meant: 'UPSTREAM_URL' }))[0];
  return new ConfigError(
    `no upstream: give --upstream URL (UPSTREAM_URL, upstream.url) for a Zulip server, or --demo (DEMO=true) to try the bundled recording${
      nearMiss ? ` (${nearMiss.name} is set, but the variable is ${nearMiss.meant})` : ''
    }`,
  );
}
