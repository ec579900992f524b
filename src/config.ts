import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { parseCidr } from './http/forwarded.js';

/**
 * Layered, validated configuration (contract "Interface"):
 * config/default.json, then --config FILE, then environment variables, then flags.
 */

const httpUrl = z
  .string()
  .refine((s) => {
    try {
      const u = new URL(s);
      return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== '';
    } catch {
      return false;
    }
  }, 'must be an http:// or https:// URL')
  // P13: the upstream URL is part of every realm key and log line; it must not hold a secret.
  .refine((s) => {
    try {
      const u = new URL(s);
      return u.username === '' && u.password === '';
    } catch {
      return true;
    }
  }, 'must not contain a user name or password')
  .transform((s) => s.replace(/\/+$/, ''));

const port = z.number().int().min(0).max(65535);
const ms = z.number().int().min(0);

export const configSchema = z
  .object({
    upstream: z.object({
      /** The old Zulip server. Absent with no replay: the bundled demo recording is replayed. */
      url: httpUrl.optional(),
      /** Give up on a silent upstream after this long (504); above Zulip's ~90 s long poll. */
      timeoutMs: ms.min(1),
      /** Kept-alive upstream connections per upstream. */
      maxSockets: z.number().int().min(1),
      /** Accept self-signed upstream certificates (logged loudly at start-up). */
      insecureTls: z.boolean(),
      /** Largest upstream body the shim buffers on an intercepted endpoint. */
      maxResponseBytes: z.number().int().min(1024),
    }),
    replay: z.object({ har: z.string().min(1).optional(), strict: z.boolean() }),
    record: z.object({ har: z.string().min(1).optional() }),
    server: z.object({
      port,
      host: z.string().min(1),
      /** Largest request body read on an intercepted endpoint (413 above). */
      bodyLimitBytes: z.number().int().min(1),
      /** On SIGTERM, how long in-flight requests may take before sockets are closed. */
      shutdownGraceMs: ms,
      /**
       * X4: peers (CIDR list, or a comma-separated string from env/flag) whose X-Forwarded-Host
       * and X-Forwarded-Proto are believed; anyone else's are replaced by the shim's own view.
       * @default [] (none)
       */
      trustProxy: z.preprocess(
        (v) =>
          typeof v === 'string'
            ? v
                .split(',')
                .map((s) => s.trim())
                .filter(Boolean)
            : v,
        z.array(z.string().refine((s) => parseCidr(s) !== undefined, 'must be IP addresses or CIDR ranges (10.0.0.0/8, fd00::/8)')),
      ),
    }),
    store: z.object({
      redisUrl: z
        .string()
        .refine((s) => /^rediss?:\/\//.test(s), 'must be a redis:// or rediss:// URL')
        .optional(),
      keyPrefix: z.string(),
    }),
    presence: z.object({
      /** P9: one full upstream presence fetch per realm per this many ms; 0 = no sharing. */
      coalesceMs: ms,
      /**
       * P9: share one realm snapshot among callers. "auto" = only below feature level 228,
       * where every caller sees the same users; "always" = the operator vouches for it.
       */
      shareSnapshots: z.enum(['auto', 'always', 'never']),
      maxRealms: z.number().int().min(1),
    }),
    lookups: z.object({ ttlMs: ms.min(1), maxEntries: z.number().int().min(1) }),
    featureLevel: z.object({ ttlMs: ms.min(1) }),
    log: z.object({
      level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
    }),
  })
  .superRefine((c, ctx) => {
    if (c.upstream.url && c.replay.har) {
      ctx.addIssue({
        code: 'custom',
        path: ['replay', 'har'],
        message: 'give either --upstream or --replay, not both',
      });
    }
  });

export type Config = z.infer<typeof configSchema>;

export class ConfigError extends Error {
  override name = 'ConfigError';
}

type Kind = 'string' | 'int' | 'bool';
interface Setting {
  path: [string, string];
  flag: string;
  env: string;
  kind: Kind;
}

/** The Interface table of the contract, one row per setting. */
const SETTINGS: Setting[] = [
  { flag: 'upstream', env: 'UPSTREAM_URL', path: ['upstream', 'url'], kind: 'string' },
  { flag: 'replay', env: 'REPLAY_HAR', path: ['replay', 'har'], kind: 'string' },
  { flag: 'record', env: 'RECORD_HAR', path: ['record', 'har'], kind: 'string' },
  { flag: 'port', env: 'PORT', path: ['server', 'port'], kind: 'int' },
  { flag: 'host', env: 'HOST', path: ['server', 'host'], kind: 'string' },
  { flag: 'redis', env: 'REDIS_URL', path: ['store', 'redisUrl'], kind: 'string' },
  { flag: 'coalesce-ms', env: 'PRESENCE_COALESCE_MS', path: ['presence', 'coalesceMs'], kind: 'int' },
  { flag: 'share-snapshots', env: 'PRESENCE_SHARE_SNAPSHOTS', path: ['presence', 'shareSnapshots'], kind: 'string' },
  { flag: 'log-level', env: 'LOG_LEVEL', path: ['log', 'level'], kind: 'string' },
  { flag: 'upstream-timeout-ms', env: 'UPSTREAM_TIMEOUT_MS', path: ['upstream', 'timeoutMs'], kind: 'int' },
  { flag: 'replay-strict', env: 'REPLAY_STRICT', path: ['replay', 'strict'], kind: 'bool' },
  { flag: 'insecure-upstream-tls', env: 'UPSTREAM_INSECURE_TLS', path: ['upstream', 'insecureTls'], kind: 'bool' },
  { flag: 'trust-proxy', env: 'TRUST_PROXY', path: ['server', 'trustProxy'], kind: 'string' },
];

const here = dirname(fileURLToPath(import.meta.url));
export const PROJECT_ROOT = resolve(here, '..');
const DEFAULT_FILE = resolve(PROJECT_ROOT, 'config', 'default.json');

function readJson(file: string, what: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(`${what}: cannot read ${file} (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  try {
    const v: unknown = JSON.parse(text);
    if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
    return v as Record<string, unknown>;
  } catch (e) {
    throw new ConfigError(`${what}: ${file} is not a JSON object (${(e as Error).message})`);
  }
}

function merge(base: Record<string, unknown>, over: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const b = out[k];
    out[k] =
      v && typeof v === 'object' && !Array.isArray(v) && b && typeof b === 'object' && !Array.isArray(b)
        ? merge(b as Record<string, unknown>, v as Record<string, unknown>)
        : v;
  }
  return out;
}

function coerce(s: Setting, raw: string | boolean, source: string): unknown {
  const name = `${s.path.join('.')} (${source})`;
  if (s.kind === 'bool') {
    if (typeof raw === 'boolean') return raw;
    if (/^(1|true|yes|on)$/i.test(raw)) return true;
    if (/^(0|false|no|off|)$/i.test(raw)) return false;
    throw new ConfigError(`${name}: expected true or false, got ${JSON.stringify(raw)}`);
  }
  const text = String(raw);
  if (s.kind === 'int') {
    if (!/^\d+$/.test(text.trim())) throw new ConfigError(`${name}: expected a whole number, got ${JSON.stringify(text)}`);
    return Number(text.trim());
  }
  return text;
}

function setPath(obj: Record<string, unknown>, [a, b]: [string, string], v: unknown) {
  const inner = (obj[a] && typeof obj[a] === 'object' ? obj[a] : {}) as Record<string, unknown>;
  obj[a] = { ...inner, [b]: v };
}

export interface CliResult {
  config: Config;
  /** Which layer gave each changed key: for the start-up line and for error messages. */
  help: boolean;
  version: boolean;
}

export const USAGE = `Usage: zulip-compat-shim [options]

  --upstream URL            the old Zulip server (http or https)          [UPSTREAM_URL]
  --replay FILE.har         use a recorded HAR as the upstream            [REPLAY_HAR]
  --record FILE.har         record every upstream exchange, redacted      [RECORD_HAR]
  --port N                  listen port (default 9991)                    [PORT]
  --host H                  listen address (default 127.0.0.1)            [HOST]
  --config FILE             a JSON config file                            [CONFIG_FILE]
  --redis URL               share state between replicas through Redis    [REDIS_URL]
  --coalesce-ms N           one full presence fetch per realm per N ms    [PRESENCE_COALESCE_MS]
  --share-snapshots MODE    auto | always | never                         [PRESENCE_SHARE_SNAPSHOTS]
  --log-level L             pino level (default info)                     [LOG_LEVEL]
  --upstream-timeout-ms N   504 after N ms of upstream silence            [UPSTREAM_TIMEOUT_MS]
  --replay-strict           a replay miss fails the process at shutdown   [REPLAY_STRICT]
  --insecure-upstream-tls   accept self-signed upstream certificates      [UPSTREAM_INSECURE_TLS]
  --trust-proxy CIDRS       believe X-Forwarded-Host/Proto from these     [TRUST_PROXY]
  --version                 print the version and exit
  --help                    print this help and exit

With neither --upstream nor --replay, the bundled demo recording of a Zulip 2.1 server is replayed.
`;

/** Builds the configuration from all four layers; throws ConfigError with one clear line. */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv = process.env): CliResult {
  const options: Record<string, { type: 'string' | 'boolean' }> = {
    config: { type: 'string' },
    help: { type: 'boolean' },
    version: { type: 'boolean' },
  };
  for (const s of SETTINGS) options[s.flag] = { type: s.kind === 'bool' ? 'boolean' : 'string' };
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({ args: argv, options, strict: true, allowPositionals: false }).values as typeof values;
  } catch (e) {
    throw new ConfigError((e as Error).message.split('\n')[0] ?? 'invalid arguments');
  }

  let layered = readJson(DEFAULT_FILE, 'config/default.json');
  const file = (values.config as string | undefined) ?? env.CONFIG_FILE;
  if (file) layered = merge(layered, readJson(resolve(file), 'config file (--config)'));

  for (const s of SETTINGS) {
    const v = env[s.env];
    if (v !== undefined && v !== '') setPath(layered, s.path, coerce(s, v, s.env));
  }
  for (const s of SETTINGS) {
    const v = values[s.flag];
    if (v !== undefined) setPath(layered, s.path, coerce(s, v, `--${s.flag}`));
  }

  const parsed = configSchema.safeParse(layered);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const key = issue.path.join('.');
    const setting = SETTINGS.find((s) => s.path.join('.') === key);
    const where = setting ? ` (--${setting.flag} / ${setting.env})` : '';
    throw new ConfigError(`${key || 'config'}${where}: ${issue.message}`);
  }
  return { config: parsed.data, help: values.help === true, version: values.version === true };
}
