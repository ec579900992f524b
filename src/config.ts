import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { parseCidr } from './http/forwarded.js';
import { PROJECT_ROOT } from './version.js';

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

const port = z.number().int().min(0, 'must be a port number, 0 to 65535').max(65535, 'must be a port number, 0 to 65535');
const ms = z.number().int().min(0);
/** A byte budget (X2): at least 1 KiB. */
const bytes = z.number().int().min(1024);

/** `host:port,host:port`: Sentinels or Redis Cluster nodes. */
const redisNodes = z.string().superRefine((s, ctx) => {
  try {
    parseRedisNodes(s, 6379);
  } catch (e) {
    ctx.addIssue({ code: 'custom', message: `must be host:port,host:port (${(e as Error).message})` });
  }
});

/** A `Host` name, or `*.` and a domain (any name below it, as in nginx's `server_name`). */
const hostPattern = z
  .string()
  .transform((s) => s.trim().toLowerCase())
  .refine((s) => /^(\*\.)?[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d{1,5})?$/.test(s) || /^\[[0-9a-f:.]+\](:\d{1,5})?$/.test(s), {
    message: 'must be host names, optionally starting with *. (e.g. chat.example.com,*.example.org)',
  });

/**
 * `HOST:PORT` of a listener (IPv6 in brackets: `[::1]:9993`); port 0 picks a free one. Throws
 * an Error saying what is wrong.
 */
export function parseListenAddress(text: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]\s]+)):(\d{1,5})$/.exec(text.trim());
  if (!m) throw new Error(`must be HOST:PORT, e.g. 127.0.0.1:9993 or [::1]:9993 (got ${JSON.stringify(text)})`);
  const port = Number(m[3]);
  if (port > 65535) throw new Error(`the port must be 0 to 65535 (got ${port})`);
  return { host: (m[1] ?? m[2])!, port };
}

/** host and port of a Redis server or Sentinel. */
export interface RedisNode {
  host: string;
  port: number;
}

/**
 * `host:port,host:port` (IPv6 in brackets: `[::1]:26379`) as nodes; the port defaults to
 * `defaultPort`. Throws an Error naming the bad entry.
 */
export function parseRedisNodes(list: string, defaultPort: number): RedisNode[] {
  const nodes: RedisNode[] = [];
  for (const raw of list.split(',')) {
    const entry = raw.trim();
    if (entry === '') continue;
    const m = /^(?:\[([^\]]+)\]|([^:[\]]+))(?::(\d+))?$/.exec(entry);
    const port = m?.[3] === undefined ? defaultPort : Number(m[3]);
    if (!m || !Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`${JSON.stringify(entry)} is not host:port`);
    nodes.push({ host: (m[1] ?? m[2])!, port });
  }
  if (nodes.length === 0) throw new Error('no host:port given');
  return nodes;
}

/** `HOST:PORT` of a listener of the shim's own (parseListenAddress says what is wrong). */
const listenAddress = z.string().superRefine((s, ctx) => {
  try {
    parseListenAddress(s);
  } catch (e) {
    ctx.addIssue({ code: 'custom', message: (e as Error).message });
  }
});

/** The push bouncer's origin: the old server joins `/api/v1/remotes/…` to it, so a path in it would be dropped. */
const bouncerUrl = httpUrl.refine((s) => {
  try {
    const u = new URL(s);
    return (u.pathname === '/' || u.pathname === '') && u.search === '' && u.hash === '';
  } catch {
    return true;
  }
}, "must be the bouncer's origin only (https://push.zulipchat.com), without a path or query");

/** The highest feature level the mobile app can be shown (the shim translates the API changes up to it). */
export const APP_FEATURE_LEVEL_MAX = 277;

export const configSchema = z
  .strictObject({
    upstream: z.strictObject({
      url: httpUrl.optional().describe('The old Zulip server (http or https). One of upstream.url, replay.har or replay.demo is required.'),
      timeoutMs: ms
        .min(1)
        .describe(
          "Give up on a silent upstream after this long (504); above Zulip's ~90 s long poll. An answer the shim reads whole (presence, profile, register, lookups) ends within this long from its start, however slowly it drips (X3).",
        ),
      maxSockets: z
        .number()
        .int()
        .min(1)
        .describe(
          "Kept-alive upstream connections for the shim's own calls, as many again for passed-through requests (kept apart, so clients cannot take all of the shim's), and as many again for uploads (passed-through requests whose bodies are still arriving, so drips cannot take the others'); long polls have their own, uncapped.",
        ),
      insecureTls: z.boolean().describe('Accept self-signed upstream certificates (logged loudly at start-up).'),
      maxResponseBytes: z.number().int().min(1024).describe('Largest upstream body the shim buffers on an intercepted endpoint.'),
    }),
    replay: z.strictObject({
      har: z
        .string()
        .min(1)
        .optional()
        .describe(
          'Serve a recorded HAR file as the upstream instead: each request gets the answer recorded for it, a request without one a 502 REPLAY_MISS (H2).',
        ),
      strict: z.boolean().describe('A replay miss also fails the process at shutdown (exit code 1).'),
      demo: z.boolean().describe('Replay the bundled recording of a Zulip 2.1 server (what `npm start` does).'),
    }),
    record: z.strictObject({
      har: z
        .string()
        .min(1)
        .optional()
        .describe(
          'Write every upstream exchange to this HAR file, with credentials (Authorization, cookies, API keys, passwords) replaced by placeholders (H1). An existing file is moved aside, never overwritten.',
        ),
    }),
    server: z.strictObject({
      port: port.describe('Listen port; 0 picks a free one.'),
      host: z.string().min(1).describe('Listen address; 0.0.0.0 or :: for every interface.'),
      bodyLimitBytes: z.number().int().min(1).describe('Largest request body read on an intercepted endpoint (413 above).'),
      maxConnections: z
        .union([z.literal('auto'), z.number().int().min(1)])
        .describe(
          "Client connections open at once (X11). Half of them at most carry a passed-through request (a long poll, an upload, a WebSocket), which holds an upstream connection too; past that a passed-through request gets a 503 with Retry-After, while presence, profile, register, server_settings, users and the shim's own paths are answered on the other half. At the cap the connection idle longest is closed for a new one. auto = two thirds of the descriptors the process may open, less a reserve of 512 and the three upstream pools (3 × upstream.maxSockets).",
        ),
      bodyTimeoutMs: ms
        .min(1)
        .describe(
          "A request's whole body must arrive within this long of its start, else a 408 and its upstream connection is released (X11). Fits a 25 MB upload at 100 KB/s; server.bodyReadTimeoutMs cuts a drip long before.",
        ),
      bodyReadTimeoutMs: ms
        .min(1)
        .describe(
          "A request body must keep arriving: at least 1 KiB of it in every this many ms (or its end), else a 408 and its upstream connection is released (X11). Stricter than nginx's client_body_timeout, a deadline per read, which a byte every few seconds passes.",
        ),
      uploadsPerAddress: z
        .number()
        .int()
        .min(1)
        .describe(
          'Passed-through requests whose bodies are still arriving (uploads), at once per client address (the peer, or behind a server.trustProxy proxy the address it forwards for); past it a 503 with Retry-After, so clients at one address cannot hold the pass-through pool (X11).',
        ),
      shutdownGraceMs: ms.describe(
        'On SIGTERM or SIGINT: how long in-flight requests (long polls too) may take before they are ended (X9).',
      ),
      realmHosts: z
        .array(hostPattern)
        .describe('Admit only these Host names (`*.` wildcards); any other Host gets a 400 with no upstream call (X2). Empty: any.'),
      trustProxy: z
        .array(z.string().refine((s) => parseCidr(s) !== undefined, 'must be IP addresses or CIDR ranges (10.0.0.0/8, fd00::/8)'))
        .describe(
          "Peers (addresses or CIDR ranges) whose X-Forwarded-Host, X-Forwarded-Proto and X-Request-Id are kept, and whose X-Forwarded-For names the client address (the access log's `remote`, the proxy then its `peer`; what new realms are counted against); anyone else's are replaced by the shim's own view (X4). Empty: none.",
        ),
      adminListen: listenAddress
        .optional()
        .describe(
          'HOST:PORT of a second listener for /healthz, /readyz and /metrics (e.g. 127.0.0.1:9993); the public port then answers those paths with a 404. Absent: they are answered on the public port.',
        ),
    }),
    store: z.strictObject({
      redisUrl: z
        .string()
        .refine((s) => /^rediss?:\/\//.test(s), 'must be a redis:// or rediss:// URL')
        .optional()
        .describe(
          'A Redis server (redis:// or rediss://) where several replicas share presence state and lookups (S1); absent = in-memory, this process only.',
        ),
      keyPrefix: z.string().describe('Prefix of every Redis key; the same for every replica.'),
      redisSentinels: redisNodes
        .optional()
        .describe('Instead of redisUrl: the Sentinels (`host:port,host:port`) that name the primary; with redisSentinelName.'),
      redisSentinelName: z.string().min(1).optional().describe("The Sentinels' name for the primary (`sentinel monitor NAME …`)."),
      redisCluster: redisNodes.optional().describe('Instead of redisUrl: some nodes (`host:port,host:port`) of a Redis Cluster.'),
    }),
    presence: z.strictObject({
      coalesceMs: ms.describe(
        'At most one full upstream presence fetch per realm per this many ms, its answer shared by the callers in that window (P9); 0 = no sharing.',
      ),
      shareSnapshots: z
        .enum(['auto', 'always', 'never'])
        .describe(
          'Share one realm presence snapshot among callers (P9). auto = only below feature level 228, where every caller sees the same users; always = the operator vouches for it.',
        ),
      leaderWaitMs: ms.describe(
        "How long the poll whose own report fetches a refresh waits for it at least before a delta poll is answered from the ledger (its next poll gets the refresh); where the realm's last refresh took longer, that long and a quarter more, at most 3 s. A poll following another replica's fetch does not wait.",
      ),
      maxRealms: z.number().int().min(1).describe('Realms whose presence state is kept in this process.'),
      newRealmsPerMinute: z
        .number()
        .int()
        .min(1)
        .describe(
          'Realms new to the shim taken on per minute by each shim process (as many at once), each once the upstream has accepted a caller of it; a request for a new realm past it gets a 503 with Retry-After, realms taken on (remembered in the store) never wait.',
        ),
      newRealmsPerAddressPerMinute: z
        .number()
        .int()
        .min(1)
        .describe(
          "A client address's own share of newRealmsPerMinute (as many at once; an IPv6 address counts by its /64). Behind a proxy, name it in server.trustProxy, or every client counts as the proxy's address.",
        ),
    }),
    lookups: z.strictObject({
      ttlMs: ms.min(1).describe('How long a looked-up user list or delivery email is reused (U2).'),
      maxEntries: z.number().int().min(1).describe('Lookup cache entries kept.'),
    }),
    app: z.strictObject({
      featureLevel: z
        .number()
        .int()
        .min(1)
        .max(APP_FEATURE_LEVEL_MAX, `must be ${APP_FEATURE_LEVEL_MAX} or lower (the highest level whose API changes the shim translates)`)
        .optional()
        .describe(
          "The feature level the Zulip mobile app (requests whose User-Agent starts with one of app.userAgents) is shown in server_settings and register, with the API changes between the server's real level and it translated (docs/mobile-app.md). Only for servers at Zulip 5.0 (feature level 122) or later; absent: off.",
        ),
      userAgents: z.array(z.string().min(1)).describe('User-Agent prefixes of the app that is shown app.featureLevel.'),
    }),
    push: z.strictObject({
      relayListen: listenAddress
        .optional()
        .describe(
          "HOST:PORT of the push relay (M7, docs/mobile-app.md): a listener of its own, for the old Zulip server's PUSH_NOTIFICATION_BOUNCER_URL. It adds realm_url and realm_name to each notification for the mobile app and forwards every call to push.bouncerUrl. Absent: off; the client port never relays.",
        ),
      bouncerUrl: bouncerUrl.describe(
        "The push bouncer the relay forwards to, as the server's PUSH_NOTIFICATION_BOUNCER_URL named it before (its origin only).",
      ),
    }),
    featureLevel: z.strictObject({
      ttlMs: ms.min(1).describe("How long an upstream's feature level (from server_settings) is reused."),
      failureTtlMs: ms
        .min(1)
        .describe(
          'A Host whose server_settings the upstream refused (4xx but 408 and 429, or a redirect) is not asked again for this long; callers get its refusal meanwhile (a 502 from the shim for a redirect or a refusal over 1 KiB).',
        ),
    }),
    memory: z
      .strictObject({
        featureLevelsBytes: bytes.describe("Memory budget, in bytes, for realms' server_settings results, failures included."),
        userDirectoriesBytes: bytes.describe("Memory budget, in bytes, for realms' user lists (compact email → id directories)."),
        snapshotsBytes: bytes.describe('Memory budget, in bytes, for shared presence snapshots.'),
        answersBytes: bytes.describe(
          'Memory budget, in bytes, for presence answers built from snapshots and reused by callers at the same id.',
        ),
        ledgersBytes: bytes.describe(
          "Memory budget, in bytes, for presence ledgers held in this process (the in-memory store's, or the Redis store's decoded copies).",
        ),
        lookupsBytes: bytes.describe('Memory budget, in bytes, for per-user lookups (delivery emails).'),
        callersBytes: bytes.describe(
          "Memory budget, in bytes, for callers' own user ids (GET /users/me, asked before 6.0 by GET /users when addresses are hidden), kept per caller for lookups.ttlMs.",
        ),
        largeAnswerBytes: bytes.describe(
          'Largest full presence answer or user list read, in bytes (35 MB at 100k users on 2.1); other intercepted answers keep upstream.maxResponseBytes.',
        ),
      })
      .describe(
        'Memory budgets in bytes, each evicting least recently used entries within it (X2); sizes are estimated from the upstream bytes each structure was built from.',
      ),
    log: z.strictObject({
      level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).describe('pino log level.'),
      access: z
        .enum(['on', 'off'])
        .describe(
          'One line per request (client address, user agent, bytes in and out, upstream time, what the shim did), written at any log.level but silent, as nginx keeps access_log apart from error_log; off: none, the rest of the log as its level says.',
        ),
    }),
  })
  .superRefine((c, ctx) => {
    const given = [c.upstream.url && '--upstream', c.replay.har && '--replay', c.replay.demo && '--demo'].filter(Boolean);
    if (given.length > 1) {
      ctx.addIssue({
        code: 'custom',
        path: c.replay.har ? ['replay', 'har'] : ['replay', 'demo'],
        message: `give one of --upstream, --replay or --demo, not ${given.join(' and ')}`,
      });
    }
    const redis = [c.store.redisUrl && 'redisUrl', c.store.redisSentinels && 'redisSentinels', c.store.redisCluster && 'redisCluster'];
    const redisGiven = redis.filter((k): k is string => typeof k === 'string');
    if (redisGiven.length > 1) {
      ctx.addIssue({ code: 'custom', path: ['store', redisGiven[1]!], message: 'give one of --redis, --redis-sentinels, --redis-cluster' });
    }
    if (c.store.redisSentinels && !c.store.redisSentinelName) {
      ctx.addIssue({ code: 'custom', path: ['store', 'redisSentinelName'], message: 'required with --redis-sentinels' });
    }
    if (c.store.redisSentinelName && !c.store.redisSentinels) {
      ctx.addIssue({ code: 'custom', path: ['store', 'redisSentinels'], message: 'required with --redis-sentinel-name' });
    }
  });

export type Config = z.infer<typeof configSchema>;

/** Error text on one line (a file's JSON error, say, may carry a newline). */
export function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

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
function removedError(r: RemovedSetting, source: string): ConfigError {
  return new ConfigError(`${r.path.join('.')} (${source}): removed: ${r.instead}`);
}

/** Config keys holding file paths: in a config file they are relative to that file's directory. */
const PATH_KEYS: ReadonlyArray<[string, string]> = [
  ['replay', 'har'],
  ['record', 'har'],
];

export const DEFAULT_FILE = resolve(PROJECT_ROOT, 'config', 'default.json');
const DEFAULT_SOURCE = 'config/default.json';

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

/** Every key path of a JSON object, as `a.b`, for telling which layer set which key. */
function keyPaths(obj: Record<string, unknown>, prefix = ''): string[] {
  return Object.entries(obj).flatMap(([k, v]) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? [`${prefix}${k}`, ...keyPaths(v as Record<string, unknown>, `${prefix}${k}.`)]
      : [`${prefix}${k}`],
  );
}

/**
 * A config file's comments: keys named `//`, at the top or in a section (JSON has no comments;
 * npm's package.json uses the same convention), are dropped before validation.
 */
function withoutComments(obj: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) {
    if (k === '//') continue;
    out[k] = v && typeof v === 'object' && !Array.isArray(v) ? withoutComments(v as Record<string, unknown>) : v;
  }
  return out;
}

/** Relative paths in a config file are the file's own: resolved from its directory. */
function resolvePaths(obj: Record<string, unknown>, dir: string): Record<string, unknown> {
  for (const [a, b] of PATH_KEYS) {
    const inner = obj[a];
    if (inner && typeof inner === 'object' && !Array.isArray(inner)) {
      const v = (inner as Record<string, unknown>)[b];
      if (typeof v === 'string' && v !== '') (inner as Record<string, unknown>)[b] = resolve(dir, v);
    }
  }
  return obj;
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
    // A sign is accepted here so that the schema, not this parser, words a range error.
    if (!/^-?\d+$/.test(text.trim())) throw new ConfigError(`${name}: expected a whole number, got ${JSON.stringify(text)}`);
    return Number(text.trim());
  }
  if (s.kind === 'list') return text.split(',').flatMap((x) => (x.trim() === '' ? [] : [x.trim()]));
  return text;
}

function valueAt(obj: Record<string, unknown>, [a, b]: [string, string]): unknown {
  return (obj[a] as Record<string, unknown> | undefined)?.[b];
}

function setPath(obj: Record<string, unknown>, [a, b]: [string, string], v: unknown) {
  const inner = (obj[a] && typeof obj[a] === 'object' ? obj[a] : {}) as Record<string, unknown>;
  obj[a] = { ...inner, [b]: v };
}

/** The closest of `known` to `key` within two edits: the likely intended spelling. */
function closest(key: string, known: readonly string[]): string | undefined {
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

export interface CliResult {
  config: Config;
  /** Where each key's value came from (`--port`, `PORT`, `config file …`, `config/default.json`). */
  sources: ReadonlyMap<string, string>;
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

const INFO_OPTIONS = { help: { type: 'boolean', short: 'h' }, version: { type: 'boolean', short: 'v' } } as const;

/** `--help` or `--version` anywhere among the arguments: answered before any configuration is read. */
export function infoRequest(argv: string[]): 'help' | 'version' | undefined {
  const { values } = parseArgs({ args: argv, options: INFO_OPTIONS, strict: false, allowPositionals: true });
  return values.help === true ? 'help' : values.version === true ? 'version' : undefined;
}

/**
 * A value option followed by something that starts with `-` (`--port -1`) takes it as its
 * value, as getopt does, so the schema words the error instead of Node's argument parser.
 */
function joinDashValues(argv: string[], valued: Set<string>): string[] {
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

/** Builds the configuration from all four layers; throws ConfigError with one clear line. */
export function loadConfig(argv: string[], env: NodeJS.ProcessEnv = process.env, o: { needsUpstream?: boolean } = {}): CliResult {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = { config: { type: 'string' }, ...INFO_OPTIONS };
  for (const s of SETTINGS) options[s.flag] = { type: s.kind === 'bool' ? 'boolean' : 'string', ...(s.short ? { short: s.short } : {}) };
  const valued = new Set(Object.entries(options).flatMap(([k, o]) => (o.type === 'string' ? [`--${k}`] : [])));
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({ args: joinDashValues(argv, valued), options, strict: true, allowPositionals: false }).values as typeof values;
  } catch (e) {
    const given =
      (e as NodeJS.ErrnoException).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? /'(-[^']*)'/.exec((e as Error).message)?.[1] : undefined;
    if (given) {
      const name = given.replace(/^-+/, '').split('=')[0]!;
      const removed = given.startsWith('--') ? REMOVED_SETTINGS.find((r) => r.flag === name) : undefined;
      if (removed) throw removedError(removed, `--${name}`);
      // Read as a variable (--redis-url as REDIS_URL, --upstream-timeout as UPSTREAM_TIMEOUT), the
      // near misses of the environment's apply; else the closest flag.
      const asEnv = name.toUpperCase().replace(/-/g, '_');
      const env = knownEnvNames().includes(asEnv) ? asEnv : envNearMiss(asEnv);
      const byEnv = env === 'CONFIG_FILE' ? 'config' : SETTINGS.find((x) => x.env === env)?.flag;
      const hint = byEnv ?? closest(name, [...Object.keys(options), 'check', 'healthcheck']);
      throw new ConfigError(`${given}: unknown option${hint ? ` (did you mean --${hint}?)` : ''}`);
    }
    throw new ConfigError((e as Error).message.split('\n')[0] ?? 'invalid arguments');
  }

  // A removed setting's variable is refused as its flag is: the operator meant it.
  const removedEnv = REMOVED_SETTINGS.find((r) => env[r.env] !== undefined && env[r.env] !== '');
  if (removedEnv) throw removedError(removedEnv, removedEnv.env);

  const sources = new Map<string, string>();
  let layered = readJson(DEFAULT_FILE, DEFAULT_SOURCE);
  for (const k of keyPaths(layered)) sources.set(k, DEFAULT_SOURCE);
  const given = (values.config as string | undefined) ?? env.CONFIG_FILE;
  if (given) {
    const file = resolve(given);
    const fromFile = resolvePaths(
      withoutComments(readJson(file, `config file (${values.config ? '--config' : 'CONFIG_FILE'})`)),
      dirname(file),
    );
    for (const k of keyPaths(fromFile)) sources.set(k, `config file ${file}`);
    layered = merge(layered, fromFile);
  }

  // The layer that wins is the only one read: an overridden PORT=abc is no error.
  for (const s of SETTINGS) {
    const flag = values[s.flag];
    const fromEnv = env[s.env];
    const [raw, source] = flag !== undefined ? [flag, `--${s.flag}`] : fromEnv !== undefined && fromEnv !== '' ? [fromEnv, s.env] : [];
    if (raw === undefined || source === undefined) continue;
    setPath(layered, s.path, coerce(s, raw, source));
    sources.set(s.path.join('.'), source);
  }

  const config = validated(layered, sources);
  // --help and --version are answered before any configuration is read (infoRequest).
  if ((o.needsUpstream ?? true) && !hasUpstream(config)) {
    // A near miss in the environment (UPSTREAM=, UPSTREM_URL=, REPLAY=) is the usual cause: name it.
    const known = new Set(SETTINGS.map((s) => s.env));
    const upstreamVariables = ['UPSTREAM_URL', 'REPLAY_HAR', 'DEMO'];
    const nearMiss =
      envNearMisses(env).find((m) => upstreamVariables.includes(m.meant)) ??
      Object.keys(env)
        .filter((k) => /^UPSTREAM/i.test(k) && !known.has(k) && env[k])
        .map((name) => ({ name, meant: 'UPSTREAM_URL' }))[0];
    throw new ConfigError(
      `no upstream: give --upstream URL (UPSTREAM_URL, upstream.url) for a Zulip server, or --demo (DEMO=true) to try the bundled recording${
        nearMiss ? ` (${nearMiss.name} is set, but the variable is ${nearMiss.meant})` : ''
      }`,
    );
  }
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

/** A removed setting among the keys the schema did not know (a config file's, the options'), as its one line. */
function removedKeyError(issues: readonly z.core.$ZodIssue[], sources: ReadonlyMap<string, string>): ConfigError | undefined {
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
function describeIssue(issue: z.core.$ZodIssue, sources: ReadonlyMap<string, string>): string {
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
