import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger as PinoLogger } from 'pino';
import type { Registry } from 'prom-client';
import type { z } from 'zod';
import { ConfigError, configFromObject, type Config, type configSchema } from './config/index.js';
import { openShim } from './embed.js';
import { closeLogger, createLogger } from './observability/logger.js';
import { DEMO_HAR } from './open-upstream.js';

/**
 * The embedding API (`import { createShim } from 'zulip-compat-shim'`): a shim started inside
 * another program, configured by an object with the configuration's own names, defaults and
 * validation (README "Configuration reference"); what the command reports and exits 2 for is
 * thrown here as a ConfigError with the same words.
 */

export { ConfigError, DEMO_HAR };

/** A deep-partial object, arrays given whole. */
export type DeepPartial<T> = T extends readonly unknown[] ? T : T extends object ? { [K in keyof T]?: DeepPartial<T[K]> } : T;

/** Every setting, as a config file gives it (before defaults and validation). */
export type ShimSettings = z.input<typeof configSchema>;

/** The validated configuration a shim runs with (defaults filled in). */
export type ShimConfig = Config;

/** Where the shim's log lines (pino JSON, one per line) go; stdout by default. */
export interface LogDestination {
  write(line: string): void;
}

/**
 * The settings (any of them, merged over config/default.json: `upstream.url`, `replay.har`,
 * `replay.demo`, `record.har`, `server.port`, `log.level`, …) and what only an embedding program
 * can give.
 */
export type ShimOptions = DeepPartial<ShimSettings> & {
  /** Where log lines are written instead of stdout. */
  logDestination?: LogDestination;
  /**
   * The application's own pino logger: the shim's lines (and its access lines, with
   * `log.access: 'on'`) are written through it, at the level it is set to (`log.level` and
   * `logDestination` are then not used). As pino-http and Fastify take one.
   */
  logger?: PinoLogger;
  /** With `replay.har` or `replay.demo`: told of each request the recording has no answer for. */
  onReplayMiss?: (request: string) => void;
};

export interface ShimAddress {
  port: number;
  host: string;
  /** `http://host:port` (IPv6 in brackets). */
  url: string;
}

/** What a request handler of Node's `http.createServer` takes. */
export type RequestHandler = (req: IncomingMessage, res: ServerResponse) => void;

export interface Shim {
  /** The configuration it runs with; once listening, `server.port` is the port it listens on (the one picked for 0). */
  readonly config: Readonly<ShimConfig>;
  /** What it is in front of: the upstream's URL, or `replay:FILE`. */
  readonly upstream: string;
  /** The Node request handler, for a server of your own (`http.createServer(shim.handler)`). */
  readonly handler: RequestHandler;
  /**
   * One request: with `next`, only the endpoints the shim intercepts are answered, and every
   * other request is given to `next` untouched (the Express middleware's `passThrough: false`).
   */
  handle(req: IncomingMessage, res: ServerResponse, next?: () => void): void;
  /**
   * Whether the shim answers this request itself: an endpoint it intercepts, the mobile app's
   * translated requests among them (what `handle` with `next` serves rather than hands on).
   */
  intercepts(req: IncomingMessage): boolean;
  /**
   * Listens (by default at `server.port` and `server.host`; port 0 picks a free one), and on
   * `server.adminListen` and `push.relayListen` when configured; resolves with the public address.
   */
  listen(port?: number, host?: string): Promise<ShimAddress>;
  /**
   * Graceful stop: no new connections, in-flight requests get `server.shutdownGraceMs`, then
   * the replay or recorder is closed. Calling it again returns the same promise.
   */
  close(): Promise<void>;
  /** The prom-client registry `/metrics` is written from. */
  readonly metrics: Registry;
  /** The requests a replay had no recorded answer for, in order (empty when not replaying). */
  replayMisses(): string[];
}

/**
 * The configuration `options` describe, validated: throws ConfigError (with the words the
 * command would print) when it is not valid. createShim calls it first; it starts nothing.
 */
export function resolveConfig(options: ShimOptions = {}): ShimConfig {
  return validated(options).config;
}

/** The configuration, and where each key's value came from (for the words of a later ConfigError). */
function validated(options: ShimOptions): { config: ShimConfig; sources: ReadonlyMap<string, string> } {
  const { logDestination: _d, onReplayMiss: _m, logger: _l, ...settings } = options;
  return configFromObject(settings);
}

/** Starts a shim: its upstream (or replay, or recorder) opened, not yet listening. */
export async function createShim(options: ShimOptions = {}): Promise<Shim> {
  const { config, sources } = validated(options);
  const log = options.logger ?? createLogger(config.log.level, options.logDestination);
  const opened = await openShim({ config, log, sources, ...(options.onReplayMiss ? { onMiss: options.onReplayMiss } : {}) });
  const { shim, upstream } = opened;
  return {
    config,
    upstream: upstream.describe,
    handler: (req, res) => shim.handle(req, res),
    handle: (req, res, next) => shim.handle(req, res, next),
    intercepts: (req) => shim.intercepts(req),
    async listen(port, host) {
      await shim.listen(port, host);
      await shim.listenAdmin();
      await shim.listenPushRelay();
      const at = shim.server.address() as AddressInfo;
      // The configuration says where it listens: the port picked for 0, or the one passed here.
      config.server.port = at.port;
      const shown = at.address.includes(':') ? `[${at.address}]` : at.address;
      return { port: at.port, host: at.address, url: `http://${shown}:${at.port}` };
    },
    // A logger to stdout made here ends with the shim (its timer, its flush at exit).
    close: () => opened.close().then(() => closeLogger(log)),
    metrics: shim.context.metrics.registry,
    replayMisses: () => upstream.misses(),
  };
}
