import { z } from 'zod';
import { parseCidr } from '../http/forwarded.js';

/**
 * The configuration's schema (contract "Interface"): every key, its default's type, its
 * validation and the words of its errors. The layers it validates are read in load.ts.
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
/** A host to reach a listener bound to `host` from this machine: the loopback for a wildcard. */
export function reachableHost(host: string): string {
  return host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '::1' : host;
}

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
        totalBytes: bytes.describe(
          'Memory budget, in bytes, over the budgets above together but featureLevelsBytes (whose entries are made before credentials are checked): each is sized for the largest realm it must hold, so together they could hold several; past this, the entry used longest ago goes, whichever budget holds it. A realm of 250,000 users takes about 142 MiB of it while its snapshot is alive: raise it to serve one that large beside others.',
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

/**
 * X2: what the budgets of realms taken on may charge together: memory.totalBytes, or the sum of
 * those budgets where that is lower. featureLevelsBytes stays apart: its entries are made before
 * a caller's credentials are checked (a made-up Host's server_settings), so they must not push
 * a realm's state out (X12); largeAnswerBytes bounds one read, not what is kept.
 */
export function memoryCap(memory: Config['memory']): number {
  const { largeAnswerBytes, totalBytes, featureLevelsBytes, ...kinds } = memory;
  return Math.min(
    totalBytes,
    Object.values(kinds).reduce((sum, bytes) => sum + bytes, 0),
  );
}

/** X2: what every byte budget may charge together: the cap above, and featureLevelsBytes beside it. */
export function memoryBound(memory: Config['memory']): number {
  return memoryCap(memory) + memory.featureLevelsBytes;
}
