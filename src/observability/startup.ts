import type { Logger } from './logger.js';

/** What the start-up line tells an operator, once, right after the shim listens. */
export interface StartupFacts {
  version: string;
  upstream: string;
  /** `memory` or `redis`. */
  store: string;
  listen: string;
  /** The admin listener's URL (--admin-listen), if there is one. */
  admin?: string;
  /** The push relay's URL (--push-relay-listen) and the bouncer it forwards to, if there is one. */
  pushRelay?: string;
  bouncer?: string;
}

/** How long the start-up line waits for the upstream's feature level before saying "unknown". */
export const FEATURE_LEVEL_WAIT_MS = 2000;

/** The feature level, or "unknown" when the upstream fails or is slower than `waitMs`. */
export async function featureLevelOrUnknown(ask: () => Promise<number>, waitMs: number): Promise<number | 'unknown'> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'unknown'>((resolve) => {
    timer = setTimeout(() => resolve('unknown'), waitMs);
    timer.unref();
  });
  try {
    return await Promise.race([ask().catch(() => 'unknown' as const), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A URL fit for a log line: user and password (if any were given in it) are masked. */
export function loggableUrl(url: string): string {
  try {
    const u = new URL(url);
    if (!u.username && !u.password) return url;
    u.username = u.username ? '***' : '';
    u.password = u.password ? '***' : '';
    const shown = u.toString();
    // URL adds a "/" path to a bare origin; keep the operator's spelling.
    return !url.endsWith('/') && shown.endsWith('/') ? shown.slice(0, -1) : shown;
  } catch {
    return url;
  }
}

/**
 * Logs the start-up line. Serving has already begun: the upstream is asked for its feature
 * level with a short wait, so a slow or absent upstream never holds up start-up.
 */
export async function logStartup(
  log: Logger,
  facts: StartupFacts,
  featureLevel: () => Promise<number>,
  waitMs = FEATURE_LEVEL_WAIT_MS,
): Promise<void> {
  const level = await featureLevelOrUnknown(featureLevel, waitMs);
  log.info(
    {
      version: facts.version,
      upstream: loggableUrl(facts.upstream),
      featureLevel: level,
      store: facts.store,
      listen: facts.listen,
      ...(facts.admin ? { admin: facts.admin } : {}),
      ...(facts.pushRelay ? { pushRelay: facts.pushRelay, bouncer: facts.bouncer } : {}),
    },
    'zulip-compat-shim listening',
  );
}
