import type { ServerInfo } from '../upstream/feature-level.js';
import { realmOf, type Realm } from '../upstream/realm.js';

/**
 * M7: what the relay asks about a notification's realm (its feature level and name), from the
 * realm's server_settings as the shim keeps them (upstream/feature-level.ts: cached per Host,
 * single flight, within its memory budget, a refused Host remembered).
 */

/**
 * How long a notification waits for its realm's server_settings. The server gives up on its
 * bouncer after 30 s and then retries; a notification is better sent on without the realm's name
 * (the name of last resort is its host) than not at all.
 */
export const REALM_WAIT_MS = 5_000;

export interface RealmFacts {
  /** The shim's realm facts for a Host (FeatureLevels.info). */
  lookup(realm: Realm): Promise<ServerInfo>;
  /** The upstream's identity in realm keys. */
  upstreamId: string;
  /** X2: whether a Host may cost the upstream a call (server.realmHosts). */
  admits(host: string): boolean;
}

/** Why a realm's facts are not known, for the log line; undefined when they are. */
export type Unknown = 'no realm URL' | 'host not admitted' | 'server_settings failed' | 'server_settings too slow';

/** The facts of the realm at `realmUrl`, or why they are not known. Never throws. */
export async function realmFactsOf(
  facts: RealmFacts,
  realmUrl: string | undefined,
  waitMs = REALM_WAIT_MS,
): Promise<{ info?: ServerInfo; unknown?: Unknown }> {
  let host: string;
  try {
    host = new URL(realmUrl ?? '').host;
  } catch {
    return { unknown: 'no realm URL' };
  }
  if (!host) return { unknown: 'no realm URL' };
  if (!facts.admits(host)) return { unknown: 'host not admitted' };
  let timer: NodeJS.Timeout | undefined;
  const slow = new Promise<'slow'>((resolve) => {
    timer = setTimeout(() => resolve('slow'), waitMs);
  });
  try {
    const found = await Promise.race([facts.lookup(realmOf(facts.upstreamId, { host })), slow]);
    return found === 'slow' ? { unknown: 'server_settings too slow' } : { info: found };
  } catch {
    return { unknown: 'server_settings failed' };
  } finally {
    clearTimeout(timer);
  }
}
