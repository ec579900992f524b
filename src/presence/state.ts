import { LRUCache } from 'lru-cache';
import type { Encodable } from '../http/compress.js';
import type { LedgerState } from './ledger.js';
import type { Snapshot } from './snapshots.js';
import { StoreAwayState } from './store-away.js';

/** A realm with no legacy poll for this long stops keeping its snapshots' legacy answers (X2). */
const LEGACY_POLLED_TTL_MS = 3_600_000;

/**
 * What is derived from one ledger state and reused by every answer built from it. A ledger
 * state is a value (ledger.ts): what is derived from it never goes stale, and goes when the
 * state does.
 */
export interface LedgerMemo {
  /** The snapshot polls answered during a refresh are built from (B7, sharing.ts). */
  snapshot?: Snapshot;
  /** Modern answer bodies by key (the same for every caller at the same id), within the answers budget. */
  bodies?: Map<string, Encodable>;
  /** Bodies being built: later callers wait for the one in progress (B7). */
  building?: Map<string, Promise<Encodable>>;
  /** The users' part of the full modern answer at this state (the bytes-saved metric). */
  usersBytes?: Promise<number>;
}

/** A user's last accepted active report, and whether the upstream applies their reports (P15, 3.0+). */
export interface Reported {
  /** The upstream's time of the user's last accepted active report. */
  at: number;
  /** Whether the upstream applies the user's reports, as its snapshots last showed; undefined: not shown yet. */
  applied: boolean | undefined;
}

/**
 * The presence service's own state in this process, beside the ledgers (the store) and the
 * snapshots (SnapshotHub): one per shim, built in server.ts, so two shims in one process (tests,
 * an embedding application) never share it.
 */
export class PresenceState {
  private readonly memos = new WeakMap<LedgerState, LedgerMemo>();
  /** The users' part of a full answer per shard of a user table (ledger-table.ts shares shards between states). */
  readonly usersBytesByShard = new WeakMap<object, number>();
  /** P15: each user's last accepted report (X2: a few dozen bytes a user, bounded like the other per-user lookups). */
  readonly ownReports: LRUCache<string, Reported>;
  /**
   * X2: realms whose clients poll in the legacy format (P1), recently: only their snapshots keep
   * the upstream's legacy answer for the rest of the window (a megabyte at 5,000 users on 2.1).
   * Elsewhere it is dropped once converted; a realm's first legacy poll then fetches it.
   */
  readonly legacyPolled = new LRUCache<string, true>({ max: 10_000, ttl: LEGACY_POLLED_TTL_MS });
  /** B7: how long each scope's last refresh took, from its leader's fetch to the snapshot taken in (ms). */
  readonly fetchTimes = new LRUCache<string, number>({ max: 10_000 });
  /** memory.largeAnswerBytes was exceeded and logged (once per shim). */
  tooLargeLogged = false;
  /** When the store's unavailability was last logged (at most every 10 s). */
  storeWarnedAt = 0;
  /** S3: what this process owes clients and the ledger while the shared store is away, and after. */
  readonly storeAway = new StoreAwayState();

  constructor(maxUsers: number) {
    this.ownReports = new LRUCache({ max: maxUsers });
  }

  /** What is derived from this ledger state. */
  memo(state: LedgerState): LedgerMemo {
    let m = this.memos.get(state);
    if (!m) {
      m = {};
      this.memos.set(state, m);
    }
    return m;
  }
}
