import { LRUCache } from 'lru-cache';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { VERSION } from '../version.js';
import { FastHistogram } from './fast-histogram.js';
import { PendingCounts } from './label-children.js';
import { STORE_AWAY_PRESENCE } from './store-away.js';
import { CHANGE_NONE, CHANGE_OTHER, CLIENT_FAMILIES, UPSTREAM_LEVELS } from './client-requests.js';

/**
 * How often the event loop's delay is sampled for `nodejs_eventloop_lag_*` (ms), which every
 * reading includes (an idle loop reads about this much). prom-client's 10 ms woke an idle
 * process 100 times a second: 7.5 of the 9 ms of CPU an idle shim took each second (3 ms in
 * all at 50 ms), paid again by every replica (measured with B8; commit 45717fe).
 */
export const EVENT_LOOP_SAMPLE_MS = 50;

/** How long a scrape waits for the store's answer to a ping (store_connected) before reading 0. */
export const STORE_PROBE_MS = 1_000;

/**
 * Prometheus metrics (`GET /metrics`). Names follow Prometheus conventions: the
 * `zulip_compat_shim_` prefix, base units, bounded label values (never a user id or email).
 * The process and runtime metrics keep their standard names (`process_*`, `nodejs_*`,
 * unprefixed), so stock Node.js dashboards and alerts match them.
 */
export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  const p = 'zulip_compat_shim_';
  const buildInfo = new Gauge({
    name: `${p}build_info`,
    help: 'Always 1; the labels say which shim version runs on which Node.js',
    labelNames: ['version', 'nodejs'] as const,
    registers: [registry],
  });
  buildInfo.set({ version: VERSION, nodejs: process.version }, 1);
  const upstreamRequestCounts = new PendingCounts(['route', 'status']);
  const requestCounts = new PendingCounts(['route', 'method', 'status']);
  /** Read when passed_through_requests is collected (not set on every request: the hot path, B4). */
  const passedThroughNow = { read: () => 0 };
  /** Read when memory_budgets_bytes is collected: set by whoever holds the budgets' pool. */
  const memoryCharged = { read: (): ReadonlyMap<string, number> => new Map() };
  /** The store, pinged when store_connected is collected: set by whoever holds the store. */
  const storeProbe = { ping: async (): Promise<unknown> => undefined };
  /** Whether the upstream's last exchange got an answer (upstream-metrics.ts sets it, one assignment an exchange). */
  const upstreamAnswered = { last: 0 };
  const clientRequestCounts = new PendingCounts(['client', 'upstream_level', 'change']);
  return {
    registry,
    /**
     * route: see observability/route-label.ts (a fixed set, never a raw path);
     * status: 1xx..5xx, or error (no answer) / timeout (upstream silent past the timeout).
     * Counts the pass-through and the shim's own calls (presence, profile, version detection).
     */
    upstreamRequests: new Counter({
      name: `${p}upstream_requests_total`,
      help: 'Requests the shim sent to the upstream (pass-through and its own calls), by route and HTTP status class (error/timeout: no answer)',
      labelNames: ['route', 'status'] as const,
      registers: [registry],
      collect() {
        upstreamRequestCounts.flushInto(this);
      },
    }),
    /** Counted on the hot path, handed to upstream_requests_total when it is collected. */
    upstreamRequestCounts,
    /** Up to the response headers, so a long poll (`events`) counts its whole wait. */
    upstreamDuration: new FastHistogram({
      name: `${p}upstream_request_duration_seconds`,
      help: 'Time from sending a request to the upstream until its response headers arrived (answered requests only), by route',
      labelNames: ['route'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 90, 120],
      registers: [registry],
    }),
    /** kind: legacy_full | modern_full | delta | resync | store_away | ping | passthrough */
    presenceAnswers: new Counter({
      name: `${p}presence_answers_total`,
      help: "Presence answers by kind: legacy_full, modern_full, delta, resync (full data because the client id could not be vouched for), store_away (modern full data while the shared store was away, with the client's own id), ping, passthrough",
      labelNames: ['kind'] as const,
      registers: [registry],
    }),
    /** source: upstream (a full fetch) | shared (answered from a shared snapshot) */
    presenceSnapshots: new Counter({
      name: `${p}presence_snapshot_uses_total`,
      help: 'Full presence fetched from the upstream (source upstream) vs answers served from a shared snapshot (source shared)',
      labelNames: ['source'] as const,
      registers: [registry],
    }),
    /** kind: legacy_full | modern_full | delta | resync | store_away (as presence_answers_total) */
    presenceBytesSent: new Counter({
      name: `${p}presence_sent_bytes_total`,
      help: 'Bytes of presence answers sent to clients (as sent, gzipped or not), by answer kind as in presence_answers_total',
      labelNames: ['kind'] as const,
      registers: [registry],
    }),
    /** Per answer, never below its bytes sent: 1 - sent/full is the saving, 0 or more. */
    presenceBytesFull: new Counter({
      name: `${p}presence_full_equivalent_bytes_total`,
      help: 'Uncompressed bytes of the full answer the same polls would have got without deltas (a delta: the full modern answer; other kinds: the answer itself), by answer kind; never below the bytes sent',
      labelNames: ['kind'] as const,
      registers: [registry],
    }),
    ledgerUsers: boundedByLabel(
      new Gauge({
        name: `${p}ledger_users`,
        help: `Users held in the presence ledger, by realm host (the ${MAX_REALM_LABELS} realms set most recently)`,
        labelNames: ['realm'] as const,
        registers: [registry],
      }),
      MAX_REALM_LABELS,
    ),
    /** cache: a SharedCache's name (user_directory | own_profile | caller); result: hit | miss */
    lookups: new Counter({
      name: `${p}lookup_cache_total`,
      help: 'Lookup cache hits and misses, by cache (user_directory, own_profile, caller) and result (hit, miss)',
      labelNames: ['cache', 'result'] as const,
      registers: [registry],
    }),
    /**
     * Client-facing: every request a client sent, answered by the shim or passed
     * through. route: observability/route-label.ts; method: a fixed set (other methods: `other`);
     * status: 1xx..5xx (statusLabel), or `aborted` (the client left before the answer was complete).
     */
    requests: new Counter({
      name: `${p}requests_total`,
      help: 'Requests from clients, by route class, method and status class (aborted: the client left first)',
      labelNames: ['route', 'method', 'status'] as const,
      registers: [registry],
      collect() {
        requestCounts.flushInto(this);
      },
    }),
    /** Counted on the hot path, handed to requests_total when it is collected. */
    requestCounts,
    /** To the last byte of the answer; `events` counts each long poll's whole wait. */
    requestDuration: new FastHistogram({
      name: `${p}request_duration_seconds`,
      help: 'Time from a client request to the end of its answer, by route class and method',
      labelNames: ['route', 'method'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 90, 120],
      registers: [registry],
    }),
    /** X2: what the byte budgets charge now, and the cap on it. */
    memoryBudgets: new Gauge({
      name: `${p}memory_budgets_bytes`,
      help: 'Bytes each memory budget of realms taken on charges for what the shim keeps, by budget (named as its setting: userDirectories for memory.userDirectoriesBytes; featureLevels, kept apart, is not among them); together held at or below memory_budgets_max_bytes',
      labelNames: ['budget'] as const,
      registers: [registry],
      collect() {
        for (const [budget, bytes] of memoryCharged.read()) this.set({ budget }, bytes);
      },
    }),
    /** Where memory_budgets_bytes is read from: set by whoever holds the pool (services.ts). */
    memoryCharged,
    memoryBudgetsMax: new Gauge({
      name: `${p}memory_budgets_max_bytes`,
      help: 'What the memory budgets of realms taken on may charge together: memory.totalBytes, or the sum of those budgets where that is lower',
      registers: [registry],
    }),
    /** X11: client connections open, the cap on them, and those refused past it. */
    clientConnections: new Gauge({
      name: `${p}client_connections`,
      help: 'Client connections open',
      registers: [registry],
    }),
    clientConnectionsMax: new Gauge({
      name: `${p}client_connections_max`,
      help: 'The cap on client connections (server.maxConnections; below the descriptors the process may open)',
      registers: [registry],
    }),
    clientConnectionsRefused: new Counter({
      name: `${p}client_connections_refused_total`,
      help: 'Client connections past the cap with none idle to close for them: given one answer (503 for a request to pass through) and closed, or closed at once',
      registers: [registry],
    }),
    clientConnectionsClosedIdle: new Counter({
      name: `${p}client_connections_closed_idle_total`,
      help: 'Idle client connections closed to make room: at the cap, the one idle longest for a new one; near it, one that sent no request within 5 s',
      registers: [registry],
    }),
    /** X11: requests passed through in flight, the cap on them, and those refused past it. */
    passedThrough: new Gauge({
      name: `${p}passed_through_requests`,
      help: 'Requests being passed through (long polls, uploads, WebSockets: all the shim does not answer itself)',
      registers: [registry],
      collect() {
        this.set(passedThroughNow.read());
      },
    }),
    /** Where passed_through_requests is read from: set by whoever counts them (the connection cap). */
    passedThroughNow,
    passedThroughMax: new Gauge({
      name: `${p}passed_through_requests_max`,
      help: 'The cap on requests passed through at once (half of server.maxConnections)',
      registers: [registry],
    }),
    passedThroughRefused: new Counter({
      name: `${p}passed_through_refused_total`,
      help: 'Requests to pass through answered 503 because passed_through_requests_max were in flight (the shim still answered its own endpoints)',
      registers: [registry],
    }),
    uploadsRefused: new Counter({
      name: `${p}uploads_refused_total`,
      help: 'Uploads (requests passed through with a body still to come) answered 503 because their client address had server.uploadsPerAddress in flight',
      registers: [registry],
    }),
    bodyTimeouts: new Counter({
      name: `${p}request_body_timeouts_total`,
      help: 'Requests answered 408 because their body did not keep arriving (reason stalled: under 1 KiB in server.bodyReadTimeoutMs) or was not all in within server.bodyTimeoutMs (reason total)',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    /** X12: requests for a realm new to the shim refused past presence.newRealmsPerMinute or the address's share. */
    realmsRefused: new Counter({
      name: `${p}new_realms_refused_total`,
      help: "Requests for a realm new to the shim answered 503 because new realms were taken on faster than presence.newRealmsPerMinute, or than the client address's share (presence.newRealmsPerAddressPerMinute)",
      registers: [registry],
    }),
    /** M7: kind: message | remove | other (a notification's `event`); changed: true | false */
    pushNotifications: new Counter({
      name: `${p}push_notifications_total`,
      help: 'Notifications the push relay passed to the bouncer, by kind (message, remove, other) and whether it added realm_url or realm_name (changed: true, false)',
      labelNames: ['kind', 'changed'] as const,
      registers: [registry],
    }),
    /** M7: reason: http_4xx | http_5xx (the bouncer's answer, passed on as it came) | unreachable | timeout */
    pushBouncerErrors: new Counter({
      name: `${p}push_bouncer_errors_total`,
      help: "Push relay calls the bouncer did not answer with success, by reason: http_4xx, http_5xx (its answer went back to the server as it came), unreachable, timeout (the relay's own 502 or 504)",
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
    /**
     * Who is served what (client-requests.ts): client: a client family from the User-Agent;
     * upstream_level: the realm's Zulip major version; change: each registry change applied to
     * the request (its feature name), or none.
     */
    clientRequests: new Counter({
      name: `${p}client_requests_total`,
      help: `Client requests by client family (${CLIENT_FAMILIES.join(', ')}), the realm's Zulip major version (${UPSTREAM_LEVELS.join(', ')}) and the change the shim applied: one count per change of its registry applied to the request (change: the change's feature name in the registry, the vocabulary of server_settings' zulip_compat_shim.emulated), or one count ${CHANGE_NONE} (passed through, or answered as the upstream answered; ${CHANGE_OTHER}: a name outside the registry, not expected). Bounded: at most ${CLIENT_FAMILIES.length} × ${UPSTREAM_LEVELS.length} × (the registry's changes + 2) series. When every client's requests count change ${CHANGE_NONE}, the shim can go`,
      labelNames: ['client', 'upstream_level', 'change'] as const,
      registers: [registry],
      collect() {
        clientRequestCounts.flushInto(this);
      },
    }),
    /** Counted when each client request's answer closes, handed to client_requests_total when it is collected. */
    clientRequestCounts,
    storeConnected: new Gauge({
      name: `${p}store_connected`,
      help: `1 when the store (Redis, or memory) answered a ping at this scrape within ${STORE_PROBE_MS} ms, else 0: while 0, ${STORE_AWAY_PRESENCE} (presence answers of kind store_away)`,
      registers: [registry],
      async collect() {
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<never>((_ok, fail) => {
          timer = setTimeout(() => fail(new Error('store ping timed out')), STORE_PROBE_MS);
        });
        const up = await Promise.race([storeProbe.ping(), late]).then(
          () => 1,
          () => 0,
        );
        clearTimeout(timer);
        this.set(up);
      },
    }),
    /** Where store_connected pings: set by whoever holds the store. */
    storeProbe,
    upstreamReachable: new Gauge({
      name: `${p}upstream_reachable`,
      help: "1 when the upstream's answer to the shim's last request to it (pass-through or its own call) arrived, whatever its status; 0 when that request got none (connection error or timeout: those requests are answered 502 or 504), or before any",
      registers: [registry],
      collect() {
        this.set(upstreamAnswered.last);
      },
    }),
    /** Set by the upstream observer (upstream-metrics.ts) on each exchange. */
    upstreamAnswered,
    /** S3: what presence does meanwhile, in the words of the log lines and the README. */
    storeErrors: new Counter({
      name: `${p}store_errors_total`,
      help: `Errors talking to the shared store (Redis): ${STORE_AWAY_PRESENCE} (answers of kind store_away)`,
      registers: [registry],
    }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;

/** Realm hosts come from clients' Host headers: at most this many label values are kept. */
export const MAX_REALM_LABELS = 100;

/**
 * A gauge by realm whose label values stay bounded: setting a realm beyond `max` drops the one
 * set least recently, so no client can grow the series without bound.
 */
function boundedByLabel(gauge: Gauge<'realm'>, max: number) {
  const recent = new LRUCache<string, true>({
    max,
    dispose: (_v, realm, reason) => {
      if (reason === 'evict') gauge.remove({ realm });
    },
  });
  return {
    set(labels: { realm: string }, value: number): void {
      recent.set(labels.realm, true);
      gauge.set(labels, value);
    },
  };
}
