import type { CacheBackend } from '../cache/shared-cache.js';
import type { AdmittedRealms } from '../upstream/realm-admission.js';
import type { LedgerState, Observation, PreparedMerge } from './ledger.js';

/**
 * Where realm state lives: in this process (default) or in Redis, shared by replicas (S1).
 * Keys are realm keys (upstream + Host, never a credential, P13). The realms taken on (X12)
 * are remembered here too, with the rest of realm state.
 */
export interface PresenceStore extends AdmittedRealms {
  readonly kind: 'memory' | 'redis';
  /** The realm's ledger as stored now, or undefined when there is none (new, evicted, flushed). */
  load(realm: string): Promise<LedgerState | undefined>;
  /**
   * This process's newest copy of the realm's ledger, without asking the store: as new as the
   * last one it read or wrote. Never older than a ledger this process answered from (X1).
   */
  peek(realm: string): LedgerState | undefined;
  /**
   * Atomically merges an observation into the realm's ledger (creating a ledger with a fresh
   * epoch when there is none) and returns the ledger after the merge. One writer per realm at
   * a time, so ids stay strictly increasing whichever replica writes (P5, ledger.ts I7).
   * `prepared`: the merge computed ahead on the ledger this process last held (B7), taken
   * when the realm's ledger is still that one, rebased over the changes made since when they
   * are few (ledger.ts `rebasedMerge`).
   */
  merge(realm: string, observation: Observation, prepared?: PreparedMerge): Promise<LedgerState>;
  /**
   * Atomically raises the realm's counter past `atLeast` where ledger.ts `raiseCounter` allows
   * it (a plausible id by the store's epoch clock, within the realm's raises, X1), creating the
   * ledger when there is none;
   * `0` only creates it. Returns the ledger after.
   */
  raiseCounter(realm: string, atLeast: number): Promise<LedgerState>;
  /** Throws when the store cannot be reached (for /readyz). */
  ping(): Promise<void>;
  close(): Promise<void>;
  /** Where lookup caches are shared between replicas (S1); absent: this process only. */
  readonly cacheBackend?: CacheBackend | undefined;
}
