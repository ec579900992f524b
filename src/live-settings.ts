import type { Config } from './config/index.js';
import type { BodyLimits } from './http/body-deadline.js';
import type { IncomingMessage } from 'node:http';
import { clientAddressOf, TrustedProxies } from './http/forwarded.js';
import { UploadSlots } from './http/upload-slots.js';
import type { Logger } from './observability/logger.js';
import { realmHostMatcher } from './realm-hosts.js';

/**
 * X9: what a SIGHUP may change while the shim serves, owned in one place. Everything that reads
 * one of these settings reads it here, per request or at shutdown, so a reload takes effect at
 * once; every other setting stays as the shim started with it until a restart.
 */

/** X9: the settings a reload applies without a restart; every other change waits for one. */
export const LIVE_KEYS: ReadonlySet<string> = new Set([
  'log.level',
  'log.access',
  'server.realmHosts',
  'server.trustProxy',
  'server.bodyTimeoutMs',
  'server.bodyReadTimeoutMs',
  'server.uploadsPerAddress',
  'server.shutdownGraceMs',
]);

/** The dotted keys whose values differ between two configurations. Pure. */
export function changedKeys(a: Config, b: Config): string[] {
  const out: string[] = [];
  const walk = (x: unknown, y: unknown, path: string) => {
    const isObj = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v);
    if (isObj(x) && isObj(y)) {
      const keys = new Set([...Object.keys(x as object), ...Object.keys(y as object)]);
      for (const k of keys) walk((x as Record<string, unknown>)[k], (y as Record<string, unknown>)[k], path ? `${path}.${k}` : k);
    } else if (JSON.stringify(x) !== JSON.stringify(y)) out.push(path);
  };
  walk(a, b, '');
  return out.sort();
}

/** `config` with the live settings of `next`: what the shim runs with after a reload. Pure. */
function withLiveSettingsOf(config: Config, next: Config): Config {
  const { realmHosts, trustProxy, bodyTimeoutMs, bodyReadTimeoutMs, uploadsPerAddress, shutdownGraceMs } = next.server;
  return {
    ...config,
    log: { ...config.log, level: next.log.level, access: next.log.access },
    server: { ...config.server, realmHosts, trustProxy, bodyTimeoutMs, bodyReadTimeoutMs, uploadsPerAddress, shutdownGraceMs },
  };
}

export class LiveSettings {
  /** X4: the peers whose X-Forwarded-* headers are believed (`server.trustProxy`). */
  trustedProxies: TrustedProxies;
  /** X2: whether a Host names a realm the shim serves (`server.realmHosts`). */
  admits: (host: string | undefined) => boolean;
  /** /readyz asks the upstream as a client of an admitted realm would (X2: no call for another). */
  readyHost: string | undefined;
  /** X11: uploads in flight per client address, bounded by `server.uploadsPerAddress`. */
  readonly uploads: UploadSlots;
  /** The configuration as it stands: as started, with the live settings of the last reload. */
  private current: Config;

  constructor(
    config: Config,
    /** Its level is `log.level`. */
    private readonly log: Logger,
  ) {
    this.current = config;
    this.trustedProxies = new TrustedProxies(config.server.trustProxy);
    this.admits = realmHostMatcher(config.server.realmHosts);
    this.readyHost = firstExactHost(config.server.realmHosts);
    this.uploads = new UploadSlots(config.server.uploadsPerAddress);
  }

  /** X4: the client's address, through the trusted proxies. */
  clientAddressOf(req: IncomingMessage): string {
    return clientAddressOf(req, this.trustedProxies);
  }

  /** Whether access lines are written (`log.access`). */
  get accessLog(): boolean {
    return this.current.log.access === 'on';
  }

  /** X11: how long a body may take (`server.bodyTimeoutMs`, `server.bodyReadTimeoutMs`). */
  bodyLimits(): BodyLimits {
    return { totalMs: this.current.server.bodyTimeoutMs, windowMs: this.current.server.bodyReadTimeoutMs };
  }

  /** X9: how long in-flight requests get at shutdown (`server.shutdownGraceMs`). */
  get shutdownGraceMs(): number {
    return this.current.server.shutdownGraceMs;
  }

  /**
   * X9: SIGHUP. Takes the settings that can change while serving (LIVE_KEYS) from `next`; says
   * which changed and were applied, and which changed but need a restart (kept as they are).
   */
  reload(next: Config): { applied: string[]; kept: string[] } {
    const changed = changedKeys(this.current, next);
    const applied = changed.filter((k) => LIVE_KEYS.has(k));
    if (applied.includes('log.level')) this.log.level = next.log.level;
    if (applied.includes('server.realmHosts')) {
      this.admits = realmHostMatcher(next.server.realmHosts);
      this.readyHost = firstExactHost(next.server.realmHosts);
    }
    if (applied.includes('server.trustProxy')) this.trustedProxies = new TrustedProxies(next.server.trustProxy);
    this.uploads.perAddress = next.server.uploadsPerAddress;
    this.current = withLiveSettingsOf(this.current, next);
    return { applied, kept: changed.filter((k) => !LIVE_KEYS.has(k)) };
  }
}

const firstExactHost = (hosts: readonly string[]) => hosts.find((h) => !h.startsWith('*.'));
