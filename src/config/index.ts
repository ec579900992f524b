/**
 * The configuration (contract "Interface"): its schema (schema.ts), the settings as flags and
 * variables and `--help` (flags.ts), the hints that make an error one clear line (hints.ts),
 * and the loading of its layers (files.ts, load.ts).
 */

export { ConfigError, oneLine } from './errors.js';
export { DEFAULT_FILE } from './files.js';
export { infoRequest, REMOVED_SETTINGS, SETTINGS, usage, type RemovedSetting, type Setting } from './flags.js';
export { editDistance, envNearMiss, envNearMisses, knownEnvNames, namedKey } from './hints.js';
export { configFromObject, loadConfig, type CliResult } from './load.js';
export {
  APP_FEATURE_LEVEL_MAX,
  configSchema,
  memoryBound,
  memoryCap,
  parseListenAddress,
  parseRedisNodes,
  reachableHost,
  type Config,
  type RedisNode,
} from './schema.js';
