import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { parseListenAddress, type Config } from './config/index.js';
import type { ShimContext } from './context.js';
import { CHANGE_IDS } from './changes/index.js';
import { Dispatcher } from './dispatch.js';
import { autoConnectionCap, ConnectionCap, descriptorLimit } from './http/connection-cap.js';
import { drain, shuttingDown } from './http/drain.js';
import { sendShimError, ShimError } from './http/errors.js';
import { InFlightAnswers } from './http/in-flight.js';
import { allowLongPolls, listen } from './http/listen.js';
import { ownPaths, type ReadinessCheck, type ServeOwn } from './http/own-paths.js';
import { answerClientError, refuseConnect } from './http/unusual-requests.js';
import { LiveSettings } from './live-settings.js';
import type { Logger } from './observability/logger.js';
import type { Metrics } from './observability/metrics.js';
import type { ReplicaSnapshots } from './presence/snapshots.js';
import type { PresenceStore } from './presence/ledger-store.js';
import { createPassThrough, type PassThrough } from './proxy/passthrough.js';
import { createPushRelay, type PushRelay } from './push/relay.js';
import { buildServices } from './services.js';
import type { Transport } from './upstream/transport.js';
import { realmOf } from './upstream/realm.js';
import { UpstreamRefused } from './upstream/relay.js';

/**
 * The composition root: a shim's services (services.ts), what SIGHUP may change
 * (live-settings.ts), the dispatch of requests (dispatch.ts), the shim's own paths
 * (http/own-paths.ts) and the drain (http/drain.ts), wired to the listeners.
 */

export interface ShimOptions {
  config: Config;
  log: Logger;
  /** Where upstream traffic goes (the upstream, or a recorder/replayer standing in for it). */
  target: string;
  /** The upstream's identity for realm keys. */
  upstreamId: string;
  /** Where realm state lives; by default the one config.store asks for (Redis or in-memory). */
  store?: PresenceStore;
  /** Cross-replica snapshot sharing; by default on the store's Redis, if it has one. */
  replicaSnapshots?: ReplicaSnapshots;
  /** Extra readiness checks (store reachable, …); each throws when not ready. */
  readinessChecks?: Array<() => Promise<void>>;
  /** X5: retry safe requests on a broken kept-alive connection; off where `target` is a recorder or replay. @default true */
  retryUpstream?: boolean;
}

export interface Shim {
  server: http.Server;
  context: ShimContext;
  /** X9: what a SIGHUP may change while serving, as it stands now. */
  readonly settings: LiveSettings;
  /**
   * X9: SIGHUP. Takes the settings that can change while serving (LIVE_KEYS) from `next`;
   * says which changed and were applied, and which changed but need a restart (kept as they are).
   */
  reload(next: Config): { applied: string[]; kept: string[] };
  listen(port?: number, host?: string): Promise<{ port: number; url: string }>;
  /**
   * With `server.adminListen`: the listener that answers the shim's own paths (/healthz, /readyz,
   * /metrics) and nothing else; the public one then answers them with a 404. Undefined without.
   */
  adminServer?: http.Server;
  /** Opens the admin listener (at `server.adminListen`, or where given); undefined without one. */
  listenAdmin(port?: number, host?: string): Promise<{ port: number; url: string } | undefined>;
  /**
   * With `push.relayListen`: the push relay's listener (M7), between the old server and its push
   * bouncer; it answers nothing of the shim's. Undefined without.
   */
  pushRelayServer?: http.Server;
  /** Opens the push relay's listener (at `push.relayListen`, or where given); undefined without one. */
  listenPushRelay(port?: number, host?: string): Promise<{ port: number; url: string } | undefined>;
  /**
   * Serves one request handed over by another server (a Connect/Express app, `http.createServer`)
   * as the shim's own listener would. With `next`, only the intercepted endpoints are answered:
   * any other request (for the upstream, or one of the shim's own paths) is given to `next`
   * untouched.
   */
  handle(req: IncomingMessage, res: ServerResponse, next?: () => void): void;
  /**
   * Whether the shim answers this request itself (an intercepted endpoint, the mobile app's
   * translated requests among them): what `handle` with `next` serves rather than hands on.
   */
  intercepts(req: IncomingMessage): boolean;
  /**
   * Graceful stop: no new connections, in-flight requests (those handed over by `handle` too)
   * get shutdownGraceMs.
   */
  close(): Promise<void>;
}

/** X11: the connection cap as configured (`auto`: below the process's descriptor limit), its figures in the metrics. */
function connectionCap(config: Config, metrics: Metrics): ConnectionCap {
  const max =
    config.server.maxConnections === 'auto'
      ? autoConnectionCap(descriptorLimit(), config.upstream.maxSockets)
      : config.server.maxConnections;
  const cap = new ConnectionCap(max, {
    counted: (open) => metrics.clientConnections.set(open),
    refused: () => metrics.clientConnectionsRefused.inc(),
    closedIdle: () => metrics.clientConnectionsClosedIdle.inc(),
    passThroughRefused: () => metrics.passedThroughRefused.inc(),
  });
  metrics.passedThroughNow.read = () => cap.passingThrough();
  if (Number.isFinite(max)) {
    metrics.clientConnectionsMax.set(max);
    metrics.passedThroughMax.set(cap.passThroughMax);
  }
  return cap;
}

/** M7: the push relay, on a listener of its own, when asked for. */
function pushRelayFor(config: Config, context: ShimContext, live: LiveSettings): PushRelay | undefined {
  if (!config.push.relayListen) return undefined;
  return createPushRelay({
    bouncerUrl: config.push.bouncerUrl,
    timeoutMs: config.upstream.timeoutMs,
    bodyLimitBytes: config.server.bodyLimitBytes,
    bodyLimits: () => live.bodyLimits(),
    realm: { lookup: (realm) => context.featureLevels.info(realm), upstreamId: context.upstreamId, admits: (host) => live.admits(host) },
    log: context.log,
    metrics: context.metrics,
  });
}

/** The shim's own paths: /readyz asks the upstream, the store, and any check the caller adds. */
function ownPathsFor(context: ShimContext, live: LiveSettings, extra: ShimOptions['readinessChecks']): ServeOwn {
  const { featureLevels, store, upstreamId, log } = context;
  return ownPaths({
    readiness: (req): ReadinessCheck[] => {
      const host = live.admits(req.headers.host) ? req.headers.host : live.readyHost;
      return [
        ['the Zulip server does not answer GET /api/v1/server_settings', () => featureLevels.info(realmOf(upstreamId, { host }))],
        [`the ${store.kind === 'redis' ? 'Redis' : 'memory'} store is not reachable`, () => store.ping()],
        ...(extra ?? []).map((check): ReadinessCheck => ['a readiness check failed', check]),
      ];
    },
    explains: (e) => e instanceof ShimError || e instanceof UpstreamRefused,
    registry: context.metrics.registry,
    failed: (e) => log.error({ err: e }, 'unexpected error in a shim path'),
  });
}

/** The public listener (and the admin one, with `server.adminListen`), each given to the dispatcher. */
function listenersFor(config: Config, dispatcher: Dispatcher, cap: ConnectionCap, log: Logger) {
  const server = http.createServer({ requireHostHeader: false }, dispatcher.onRequest);
  server.on('upgrade', dispatcher.onUpgrade);
  server.on('clientError', (err, socket) => answerClientError(err, socket, (facts, msg) => log.debug(facts, msg)));
  server.on('connect', refuseConnect);
  // Long polls (GET /events, ~90 s) must never be cut by the shim's own server timeouts.
  allowLongPolls(server);
  cap.watch(server);
  const admin = config.server.adminListen ? http.createServer({ requireHostHeader: false }, dispatcher.onAdminRequest) : undefined;
  return { server, admin };
}

export function createShim(o: ShimOptions): Shim {
  const { config, log } = o;
  const settings = new LiveSettings(config, log);
  const { context, transport } = buildServices(o, settings);
  const passThrough = createPassThrough({ target: o.target, transport, insecureTls: config.upstream.insecureTls, log });
  // X11: client connections capped below the descriptors the process may open, passed-through
  // requests to half of them, and uploads per client address (live settings).
  const cap = connectionCap(config, context.metrics);
  const dispatcher = new Dispatcher({
    context,
    live: settings,
    cap,
    passThrough,
    inFlight: new InFlightAnswers(),
    serveOwn: ownPathsFor(context, settings, o.readinessChecks),
    ownPathsElsewhere: Boolean(config.server.adminListen),
    changeIds: CHANGE_IDS,
  });
  const { server, admin } = listenersFor(config, dispatcher, cap, log);
  const pushRelay = pushRelayFor(config, context, settings);
  return new RunningShim({ o, settings, context, transport, passThrough, dispatcher, server, admin, pushRelay });
}

interface Parts {
  o: ShimOptions;
  settings: LiveSettings;
  context: ShimContext;
  transport: Transport;
  passThrough: PassThrough;
  dispatcher: Dispatcher;
  server: http.Server;
  admin: http.Server | undefined;
  pushRelay: PushRelay | undefined;
}

/** A shim built by createShim: its listeners, `handle` for another server's requests, reload and the drain. */
class RunningShim implements Shim {
  readonly server: http.Server;
  readonly context: ShimContext;
  readonly settings: LiveSettings;
  readonly adminServer?: http.Server;
  readonly pushRelayServer?: http.Server;
  private closing: Promise<void> | undefined;

  constructor(private readonly p: Parts) {
    this.server = p.server;
    this.context = p.context;
    this.settings = p.settings;
    if (p.admin) this.adminServer = p.admin;
    if (p.pushRelay) this.pushRelayServer = p.pushRelay.server;
  }

  reload(next: Config): { applied: string[]; kept: string[] } {
    return this.settings.reload(next);
  }

  listen(port = this.p.o.config.server.port, host = this.p.o.config.server.host) {
    return listen(this.server, port, host);
  }

  handle(req: IncomingMessage, res: ServerResponse, next?: () => void): void {
    const { dispatcher } = this.p;
    // Decided once, here when `next` needs it (routeOf reads an absolute-form target as its path).
    const route = next ? dispatcher.routeFor(req) : undefined;
    if (route && route.kind !== 'intercepted') {
      next!();
      return;
    }
    // Another server's request after close(): no listener of ours to stop accepting it.
    if (this.closing) {
      sendShimError(res, shuttingDown(), { 'retry-after': '1' });
      return;
    }
    // Its connection is not the shim's: the drain waits for its answer by this count.
    dispatcher.handedOver++;
    res.once('close', () => {
      dispatcher.handedOver--;
    });
    dispatcher.onRequest(req, res, route);
  }

  intercepts(req: IncomingMessage): boolean {
    return this.p.dispatcher.routeFor(req).kind === 'intercepted';
  }

  async listenAdmin(port?: number, host?: string) {
    const { adminListen } = this.p.o.config.server;
    if (!this.adminServer || !adminListen) return undefined;
    const at = parseListenAddress(adminListen);
    return listen(this.adminServer, port ?? at.port, host ?? at.host);
  }

  async listenPushRelay(port?: number, host?: string) {
    const { pushRelay } = this.p;
    const { relayListen } = this.p.o.config.push;
    if (!pushRelay || !relayListen) return undefined;
    const at = parseListenAddress(relayListen);
    return pushRelay.listen(port ?? at.port, host ?? at.host);
  }

  close(): Promise<void> {
    if (this.closing) return this.closing;
    const { dispatcher, passThrough, pushRelay, transport, context, o } = this.p;
    const graceMs = this.settings.shutdownGraceMs;
    const drainEnds = Date.now() + graceMs;
    // X9: each answer from now on says `Connection: close`, those in flight too (a held long
    // poll's), so no connection outlives the answer it is carrying.
    dispatcher.draining = true;
    this.closing = drain({
      server: this.server,
      sides: [this.adminServer, this.pushRelayServer].filter((s): s is http.Server => s !== undefined),
      inFlight: dispatcher.inFlight,
      graceMs,
      handedOver: () => dispatcher.handedOver,
      // WebSocket tunnels are dropped at the deadline. (The shared transport is closed after the
      // server, below: client.destroy() would be a no-op here, the client does not own it.)
      cut: () => void passThrough.close(),
    }).then(async () => {
      // A presence refresh whose leader already had its answer (B7) ends within the same deadline.
      await context.snapshots.settled(drainEnds - Date.now());
      await passThrough.close();
      await pushRelay?.close();
      await transport.close();
      await context.parser.close();
      if (!o.store) await context.store.close(); // a store passed in belongs to the caller
    });
    return this.closing;
  }
}
