import { Agent, request } from 'undici';
import type { Logger } from './observability/logger.js';
import { StoreUnavailableError } from './store/types.js';
import { featureLevelOf, realmUrlOf } from './upstream/feature-level.js';
import { APP_SERVED_FROM, unservableReason } from './app/presented.js';
import { namedKey, oneLine, SETTINGS, type Config } from './config/index.js';
import { parseCidr } from './http/forwarded.js';

/**
 * The probes of `--check`, also run once at start-up (after listening), where a failure is a
 * warning line and serving goes on: the upstream may come up later, Redis may heal.
 */

/** What one probe found: `line` says it in one line, for `--check`'s output or a log line. */
export interface Probe {
  ok: boolean;
  line: string;
  /** The upstream's feature level, where it answered as a Zulip server. */
  featureLevel?: number;
}

/** How long the upstream's server_settings may take before the probe says it does not answer. */
export const PROBE_TIMEOUT_MS = 10_000;

/**
 * Asks `target` for `/api/v1/server_settings`: a Zulip server answers 200 with a JSON object
 * naming its `zulip_version`. `name` is how the upstream is named in the line.
 */
export async function probeUpstream(target: string, name: string, o: { insecureTls?: boolean } = {}): Promise<Probe> {
  let text: string;
  let status: number;
  try {
    const r = await request(new URL('/api/v1/server_settings', target), {
      headersTimeout: PROBE_TIMEOUT_MS,
      bodyTimeout: PROBE_TIMEOUT_MS,
      ...(o.insecureTls ? { dispatcher: new Agent({ connect: { rejectUnauthorized: false } }) } : {}),
    });
    status = r.statusCode;
    text = await r.body.text();
  } catch (e) {
    return { ok: false, line: `upstream ${name}: does not answer (${oneLine((e as Error).message)})` };
  }
  if (status !== 200) return { ok: false, line: `upstream ${name}: does not answer (server_settings answered HTTP ${status})` };
  let settings: unknown;
  try {
    settings = JSON.parse(text);
  } catch {
    settings = undefined;
  }
  if (!settings || typeof settings !== 'object' || typeof (settings as Record<string, unknown>).zulip_version !== 'string') {
    return { ok: false, line: `upstream ${name}: answers, but is not a Zulip server (its server_settings names no zulip_version)` };
  }
  const s = settings as Record<string, unknown>;
  return {
    ok: true,
    line: `upstream ${name}: Zulip ${String(s.zulip_version)}, feature level ${featureLevelOf(s)}, realm ${realmUrlOf(s) ?? 'not named'}`,
    featureLevel: featureLevelOf(s),
  };
}

/**
 * M7: the push bouncer the relay forwards to answers over HTTP (any status below 500: a bouncer
 * answers its own paths only to a server with credentials, and the check sends none).
 */
export async function probeBouncer(url: string): Promise<Probe> {
  let status: number;
  try {
    const r = await request(new URL('/', url), { headersTimeout: PROBE_TIMEOUT_MS, bodyTimeout: PROBE_TIMEOUT_MS });
    status = r.statusCode;
    await r.body.dump();
  } catch (e) {
    return { ok: false, line: `push bouncer ${url}: does not answer (${oneLine((e as Error).message)})` };
  }
  if (status >= 500) return { ok: false, line: `push bouncer ${url}: answers HTTP ${status}` };
  return { ok: true, line: `push bouncer ${url}: answers (HTTP ${status})` };
}

/** Pings the store: Redis answers, or the store is this process's own memory. */
export async function probeStore(store: { kind: 'memory' | 'redis'; ping(): Promise<void> }): Promise<Probe> {
  try {
    await store.ping();
    return { ok: true, line: store.kind === 'redis' ? 'store: Redis answers' : 'store: in this process' };
  } catch (e) {
    // Our own words: the client library's say little to an operator.
    const why = e instanceof StoreUnavailableError ? e.reason : oneLine((e as Error).message);
    return { ok: false, line: `store: Redis does not answer (${why})` };
  }
}

/**
 * At start-up, once listening: the probes `--check` runs, each failure one warning line; the
 * shim keeps serving (pass-through answers 502 until the upstream answers, presence answers
 * without Redis, S3). `upstream` is left out where nothing real stands behind the shim (a replay).
 */
export async function warnAtStartup(
  log: Logger,
  probes: { upstream?: () => Promise<Probe>; store: () => Promise<Probe>; bouncer?: () => Promise<Probe> },
  appLevel?: number,
): Promise<Probe | undefined> {
  const found = await Promise.all([probes.upstream?.(), probes.store(), probes.bouncer?.()]);
  for (const p of found) if (p && !p.ok) log.warn(`start-up check: ${p.line}; serving anyway`);
  // M1: an --app-feature-level the upstream cannot be served at is the caller's to refuse.
  return appProbe(appLevel, found[0]?.featureLevel);
}

/**
 * M1: whether the mobile app can be shown `appLevel` for an upstream at `real`; undefined where
 * the flag is off or the upstream's level is unknown.
 */
export function appProbe(appLevel: number | undefined, real: number | undefined): Probe | undefined {
  if (appLevel === undefined || real === undefined) return undefined;
  if (real >= appLevel)
    return {
      ok: true,
      line: `app: the server's own feature level ${real} is at least --app-feature-level ${appLevel}: nothing to present`,
    };
  if (real >= APP_SERVED_FROM) return { ok: true, line: `app: shown feature level ${appLevel} (the server is at ${real})` };
  return {
    ok: false,
    line: `app: ${unservableReason(appLevel, real)}`,
  };
}

/** A setting as an operator gives it: `--trust-proxy (TRUST_PROXY, server.trustProxy)`. */
function settingNames(key: string): string {
  const s = SETTINGS.find((x) => x.path.join('.') === key);
  return s ? `--${s.flag} (${s.env}, ${key})` : key;
}

/** Whether a listen address is every interface. */
const everyInterface = (host: string) => host === '0.0.0.0' || host === '::' || host === '[::]';

/** Whether an upstream host name is this machine. */
function isLoopback(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h.endsWith('.localhost') || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}

/**
 * Set-ups that work but expose more than an operator likely means, one line each, naming the
 * setting (and where it was given) and what silences the line: said by `--check` and logged as
 * warnings at start-up; none stops the shim.
 */
export function riskySetups(config: Config, sources: ReadonlyMap<string, string>): string[] {
  const lines: string[] = [];
  const { host, adminListen, realmHosts, trustProxy } = config.server;
  if (everyInterface(host) && !adminListen && realmHosts.length === 0) {
    lines.push(
      `${namedKey('server.host', sources, 'default')} is ${host}, every interface: /metrics is answered there to anyone, and any Host name is taken for a realm; give ${settingNames('server.realmHosts')} the realm's names, or ${settingNames('server.adminListen')} a listener of its own for /metrics, to silence this`,
    );
  }
  const everyone = trustProxy.find((c) => parseCidr(c)?.prefix === 0);
  if (everyone !== undefined) {
    lines.push(
      `${namedKey('server.trustProxy', sources, 'default')} trusts every address (${everyone}): any client can set X-Forwarded-Proto, X-Forwarded-Host, X-Request-Id and the client address the access log and the new-realm share go by; name only your proxies' addresses in ${settingNames('server.trustProxy')} to silence this`,
    );
  }
  const url = config.upstream.url ? new URL(config.upstream.url) : undefined;
  if (url?.protocol === 'http:' && !isLoopback(url.hostname)) {
    lines.push(
      `${namedKey('upstream.url', sources, 'default')} is plain http to another host (${url.host}): API keys, passwords and messages cross the network unencrypted; give ${settingNames('upstream.url')} an https:// URL to silence this`,
    );
  }
  return lines;
}
