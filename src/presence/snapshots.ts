import { LRUCache } from 'lru-cache';
import type { Encodable } from '../http/compress.js';
import { ByteBudget } from '../store/byte-budget.js';
import { FL } from '../upstream/feature-level.js';
import type { LedgerState, ModernPresence } from './ledger.js';

/**
 * P9, shared snapshots: one full upstream presence fetch per scope (a realm and an answer
 * format, or one caller where callers may see different users) per `coalesceMs`, single
 * flight; every other poll in the window is answered from the snapshot after its own status
 * report (a `ping_only` call) succeeded.
 */

/**
 * P9: may one snapshot serve every caller of a realm? Only where every caller sees the same
 * users: below feature level 228, or where the operator says so.
 */
export function everyCallerSeesTheSameUsers(mode: 'auto' | 'always' | 'never', featureLevel: number): boolean {
  return mode === 'always' || (mode === 'auto' && featureLevel < FL.PRESENCE_ACCESS_LIMIT);
}

/** One full upstream presence answer, converted and merged. */
export interface Snapshot {
  /** The upstream's server_timestamp of the answer (P10). */
  serverTimestamp: number;
  /** Local clock (ms) when it was fetched: for the coalescing window only. */
  fetchedAt: number;
  /** The modern entries by user id; also the users in view (P7). Undefined when unconvertible. */
  modern: ReadonlyMap<number, ModernPresence> | undefined;
  /** Why `modern` is missing where a modern answer was possible in principle (2.1, no user list). */
  modernError?: Error | undefined;
  /** The upstream's own answer when it was in the legacy format (P1: passed on as made). */
  legacy: Readonly<Record<string, unknown>> | undefined;
  /** …and its bytes, so the common legacy answer is those bytes plus the id, not a re-serialisation. */
  legacyBytes?: Buffer | undefined;
  /** The realm's ledger after merging this snapshot; undefined when the store failed. */
  ledger: LedgerState | undefined;
  /** Serialised presences built from this snapshot, by answer key (computed once per snapshot). */
  readonly answers: Map<string, { json: string; maxId: number }>;
  /** Whole answer bodies (raw and gzipped) for callers at the same id: bytes reused, not rebuilt. */
  readonly bodies: Map<string, Encodable>;
}

/** What replicas exchange about a snapshot (everything but the ledger, which the store holds). */
export interface SnapshotData {
  serverTimestamp: number;
  fetchedAt: number;
  modern: Array<[number, number, number]> | undefined;
  legacy: Record<string, unknown> | undefined;
}

export function toData(s: Snapshot): SnapshotData {
  return {
    serverTimestamp: s.serverTimestamp,
    fetchedAt: s.fetchedAt,
    modern: s.modern && [...s.modern].map(([id, p]) => [id, p.active_timestamp, p.idle_timestamp]),
    legacy: s.legacy as Record<string, unknown> | undefined,
  };
}

export function fromData(
  d: SnapshotData,
  ledger: LedgerState | undefined,
  caches: Pick<Snapshot, 'answers' | 'bodies'> = { answers: new Map(), bodies: new Map() },
): Snapshot {
  return {
    serverTimestamp: d.serverTimestamp,
    fetchedAt: d.fetchedAt,
    modern: d.modern && new Map(d.modern.map(([id, a, i]) => [id, { active_timestamp: a, idle_timestamp: i }])),
    legacy: d.legacy,
    ledger,
    ...caches,
  };
}

/**
 * Cross-replica coordination (S1): at most one replica fetches a scope per window; the others
 * read its snapshot. Implemented on Redis; absent with a single replica.
 */
export interface ClusterSnapshots {
  /** A snapshot another replica published in this window, if any. */
  get(scope: string): Promise<SnapshotData | undefined>;
  /** Takes the scope's fetch lock for `ttlMs`; false when another replica holds it. */
  tryLock(scope: string, ttlMs: number): Promise<boolean>;
  /** Publishes a fetched snapshot for the rest of the window and releases the lock. */
  publish(scope: string, data: SnapshotData, ttlMs: number): Promise<void>;
  /** Releases the lock without publishing (the fetch failed). */
  release(scope: string): Promise<void>;
  /** Waits until another replica publishes (or gives up: undefined). */
  waitFor(scope: string, timeoutMs: number): Promise<SnapshotData | undefined>;
}

interface Slot {
  snapshot?: Snapshot;
  pending?: Promise<Snapshot>;
}

/**
 * X2: what a slot costs, from the upstream bytes its snapshot holds and its user count (the
 * modern map), not by walking it. The answers built from it count against their own budget.
 */
export function slotBytes(slot: Slot): number {
  const s = slot.snapshot;
  return 1024 + (s ? (s.legacyBytes?.length ?? 0) + 120 * (s.modern?.size ?? 0) : 0);
}

/** The in-process side of P9: one slot per scope, bounded. */
export class SnapshotHub {
  private readonly slots: LRUCache<string, Slot>;
  private readonly answersBudget: ByteBudget;

  constructor(
    readonly coalesceMs: number,
    maxScopes: number,
    private readonly clock: () => number = Date.now,
    /** X2: bytes the kept snapshots may take (see slotBytes). */
    maxBytes = 192 * 1024 * 1024,
    /** X2: bytes the answers built from snapshots may take, all snapshots together. */
    answersMaxBytes = 64 * 1024 * 1024,
  ) {
    this.answersBudget = new ByteBudget(answersMaxBytes);
    // A snapshot is of no use after its window: dropped then, so memory follows live realms.
    this.slots = new LRUCache({
      max: maxScopes,
      maxSize: maxBytes,
      sizeCalculation: slotBytes,
      ttl: Math.max(coalesceMs, 1) * 2,
      ttlAutopurge: true,
    });
  }

  /** Empty answer caches for a new snapshot, within the hub's answer budget (X2). */
  answerCaches(): Pick<Snapshot, 'answers' | 'bodies'> {
    return {
      answers: this.answersBudget.map((a) => 64 + 2 * a.json.length),
      // The raw bytes, and room for their gzip (added when first sent).
      bodies: this.answersBudget.map((b) => 64 + 1.5 * b.raw.length),
    };
  }

  /** A snapshot still inside its window. */
  fresh(scope: string): Snapshot | undefined {
    const s = this.slots.get(scope)?.snapshot;
    return s && this.clock() - s.fetchedAt < this.coalesceMs ? s : undefined;
  }

  /** The fetch in flight for the scope, if any. */
  pending(scope: string): Promise<Snapshot> | undefined {
    return this.slots.get(scope)?.pending;
  }

  /**
   * Runs `fetch` as the scope's single flight: callers arriving meanwhile see `pending`.
   * Must be called synchronously after fresh()/pending() found nothing. With `keep` false the
   * snapshot is not kept for the rest of the window (a per-caller scope: S2, memory must not
   * grow with callers × users).
   */
  lead(scope: string, fetch: () => Promise<Snapshot>, keep = true): Promise<Snapshot> {
    const slot: Slot = this.slots.get(scope) ?? {};
    const p = fetch().then(
      (snapshot) => {
        if (slot.pending === p) slot.pending = undefined;
        if (!keep) this.slots.delete(scope);
        else if (this.coalesceMs > 0 && (!slot.snapshot || slot.snapshot.serverTimestamp <= snapshot.serverTimestamp)) {
          slot.snapshot = snapshot;
          // Sized again, now with its snapshot (X2); lru-cache sizes a value once per set.
          this.slots.delete(scope);
          this.slots.set(scope, slot);
        }
        return snapshot;
      },
      (e: unknown) => {
        if (slot.pending === p) slot.pending = undefined;
        throw e;
      },
    );
    if (this.coalesceMs > 0) {
      slot.pending = p;
      this.slots.set(scope, slot);
    }
    return p;
  }
}
