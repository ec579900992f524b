import { dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { ConfigError } from './errors.js';
import { DEFAULT_FILE, DEFAULT_SOURCE, keyPaths, merge, readJson, resolvePaths, setPath, withoutComments } from './files.js';
import { coerce, INFO_OPTIONS, joinDashValues, REMOVED_SETTINGS, removedError, SETTINGS } from './flags.js';
import { describeIssue, flagError, noUpstreamError, removedKeyError } from './hints.js';
import { configSchema, type Config } from './schema.js';

/**
 * Layered, validated configuration (contract "Interface"):
 * config/default.json, then --config FILE, then environment variables, then flags.
 */

export interface CliResult {
  config: Config;
  /** Where each key's value came from (`--port`, `PORT`, `config file …`, `config/default.json`). */
  sources: ReadonlyMap<string, string>;
}

/** The flags given; an unknown one is refused with the spelling likely meant. */
function parsedFlags(argv: string[]): Record<string, string | boolean | undefined> {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = { config: { type: 'string' }, ...INFO_OPTIONS };
  for (const s of SETTINGS) options[s.flag] = { type: s.kind === 'bool' ? 'boolean' : 'string', ...(s.short ? { short: s.short } : {}) };
  const valued = new Set(Object.entries(options).flatMap(([k, o]) => (o.type === 'string' ? [`--${k}`] : [])));
  try {
    return parseArgs({ args: joinDashValues(argv, valued), options, strict: true, allowPositionals: false }).values;
  } catch (e) {
    throw flagError(e, Object.keys(options));
  }
}

/** The JSON layers: config/default.json, then the config file (`--config`, else CONFIG_FILE), each key's source named. */
function fileLayers(flag: string | undefined, env: NodeJS.ProcessEnv, sources: Map<string, string>): Record<string, unknown> {
  const layered = readJson(DEFAULT_FILE, DEFAULT_SOURCE);
  for (const k of keyPaths(layered)) sources.set(k, DEFAULT_SOURCE);
  const given = flag ?? env.CONFIG_FILE;
  if (!given) return layered;
  const file = resolve(given);
  const fromFile = resolvePaths(withoutComments(readJson(file, `config file (${flag ? '--config' : 'CONFIG_FILE'})`)), dirname(file));
  for (const k of keyPaths(fromFile)) sources.set(k, `config file ${file}`);
  return merge(layered, fromFile);
}

/** The flags and variables over the files, in place. The layer that wins is the only one read: an overridden PORT=abc is no error. */
function settingLayers(
  layered: Record<string, unknown>,
  values: Record<string, string | boolean | undefined>,
  env: NodeJS.ProcessEnv,
  sources: Map<string, string>,
): void {
  for (const s of SETTINGS) {
    const flag = values[s.flag];
    const fromEnv = env[s.env];
    const [raw, source] = flag !== undefined ? [flag, `--${s.flag}`] : fromEnv !== undefined && fromEnv !== '' ? [fromEnv, s.env] : [];
    if (raw === undefined || source === undefined) continue;
    setPath(layered, s.path, coerce(s, raw, source));
    sources.set(s.path.join('.'), source);
  }
}

/** Builds the configuration from all four layers; throws ConfigError with one clear line. */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv = process.env, o: { needsUpstream?: boolean } = {}): CliResult {
  const values = parsedFlags(argv);
  // A removed setting's variable is refused as its flag is: the operator meant it.
  const removedEnv = REMOVED_SETTINGS.find((r) => env[r.env] !== undefined && env[r.env] !== '');
  if (removedEnv) throw removedError(removedEnv, removedEnv.env);
  const sources = new Map<string, string>();
  const layered = fileLayers(values.config as string | undefined, env, sources);
  settingLayers(layered, values, env, sources);
  const config = validated(layered, sources);
  // --help and --version are answered before any configuration is read (infoRequest).
  if ((o.needsUpstream ?? true) && !hasUpstream(config)) throw noUpstreamError(env);
  return { config, sources };
}

/** Whether a configuration names what the shim stands in front of: a server, a recording, or the demo. */
const hasUpstream = (c: Config): boolean => Boolean(c.upstream.url || c.replay.har || c.replay.demo);

/**
 * The layered settings through the schema, or the one ConfigError that words what is wrong: a
 * removed setting, else a misspelt key first (it usually explains the other problems too), else
 * the first problem, each with where it was given.
 */
function validated(layered: unknown, sources: ReadonlyMap<string, string>): Config {
  const parsed = configSchema.safeParse(layered);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues;
  throw (
    removedKeyError(issues, sources) ??
    new ConfigError(describeIssue(issues.find((i) => i.code === 'unrecognized_keys') ?? issues[0]!, sources))
  );
}

/**
 * The configuration from settings given as an object (the embedding API's options, src/index.ts):
 * config/default.json with `given` merged over it, validated by the same schema and worded as
 * loadConfig words it, each key's source named `source`. Reads no flag, variable or file.
 */
export function configFromObject(given: unknown, source = 'options', o: { needsUpstream?: boolean } = {}): CliResult {
  if (given === null || typeof given !== 'object' || Array.isArray(given)) {
    throw new ConfigError(`${source}: must be an object of settings (as in a config file)`);
  }
  const over = JSON.parse(JSON.stringify(given)) as Record<string, unknown>;
  const sources = new Map<string, string>();
  const defaults = readJson(DEFAULT_FILE, DEFAULT_SOURCE);
  for (const k of keyPaths(defaults)) sources.set(k, DEFAULT_SOURCE);
  for (const k of keyPaths(over)) sources.set(k, source);
  const config = validated(merge(defaults, over), sources);
  if ((o.needsUpstream ?? true) && !hasUpstream(config)) {
    throw new ConfigError(
      `no upstream: give upstream.url for a Zulip server, replay.har for a recording, or replay.demo: true for the bundled one (${source})`,
    );
  }
  return { config, sources };
}
