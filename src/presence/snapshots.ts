import type { LRUCache } from 'lru-cache';
import type { MemoryPool } from '../cache/memory-pool.js';
import { budgetedLru, type Footprint } from '../cache/budgeted.js';
import type { Encodable } from '../http/compress.js';
import { ShimError } from '../http/errors.js';
import { ByteBudget } from '../cache/byte-budget.js';
import { FL } from '../upstream/feature-level.js';
import type { LedgerState, ModernPresence } from './ledger.js';
import { presencesBytes } from './columns.js';

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

/** One full upstream presence answer, taken into the realm's ledger. */
export interface Snapshot {
  /** The upstream's server_timestamp of the answer (P10). */
  serverTimestamp: number;
  /** Local clock (ms) the snapshot's window started at: for the coalescing window only. */
  fetchedAt: number;
  /**
   * True where every caller sees the same users: answers then take the users in view from the
   * ledger, which the newest complete snapshot keeps (ledger.ts I5); false for a per-caller one.
   */
  complete: boolean;
  /**
   * The modern entries by user id, where this process converted the answer: the users in view
   * of a per-caller snapshot (P7), and the data when the store is down. Undefined on a snapshot
   * read from another replica (its data is in the ledger) and where it could not be converted.
   */
  modern: ReadonlyMap<number, ModernPresence> | undefined;
  /** Why no modern answer can be built from it (2.1 without its user list). */
  modernError?: Error | undefined;
  /** The upstream's own answer as made, when it was in the legacy format (P1): passed on with the id added. */
  legacyBytes?: Buffer | undefined;
  /**
   * Where another replica published the legacy answer and it is not read yet: reads it (once
   * per snapshot, sharing.ts), only for a legacy poll. Undefined bytes: gone (store down, expired).
   */
  readLegacyBytes?: (() => Promise<Buffer | undefined>) | undefined;
  /** That read, under way or done (one per snapshot, for every legacy poll answered from it). */
  legacyRead?: Promise<Buffer | undefined> | undefined;
  /** How many users the legacy answer shows (P4: -1 only when none). */
  legacyUsers?: number | undefined;
  /**
   * The realm's ledger right after this snapshot was merged (undefined when not merged here),
   * held weakly (X2): the store decides how long a ledger is kept, within its budget. A slot
   * holding it strongly kept every realm's ledger of the last two windows alive beyond that
   * budget (a flood of realms, taken faster than the window: hundreds of megabytes). Where it
   * is gone, the store's newer copy stands for it, or the store's absence (ledger-io.ts).
   */
  merged: WeakRef<LedgerState> | undefined;
  /**
   * S3: its modern data could not be recorded (the store was away): no ledger copy holds it, so
   * modern answers are made from `modern` alone (full data, the client's own id).
   */
  storeAway?: boolean | undefined;
  /** Answer bodies built from this snapshot alone (legacy ones, and all when the store is down), by key. */
  readonly bodies: Map<string, Encodable>;
}

/**
 * What replicas exchange about a shared snapshot (S1): only what a follower needs to answer
 * that the store's ledger does not hold already.
 */
export interface SnapshotData {
  serverTimestamp: number;
  /** The message of `modernError`, when the answer could not be converted. */
  modernError?: string | undefined;
  /** The upstream's legacy answer as made (legacy scopes only), and how many users it shows. */
  legacyBytes?: Buffer | undefined;
  legacyUsers?: number | undefined;
  /** Instead of `legacyBytes` on a snapshot another replica published: where to read them when needed. */
  readLegacyBytes?: (() => Promise<Buffer | undefined>) | undefined;
}

export function toData(s: Snapshot): SnapshotData {
  return {
    serverTimestamp: s.serverTimestamp,
    modernError: s.modernError?.message,
    legacyBytes: s.legacyBytes,
    legacyUsers: s.legacyUsers,
  };
}

/** A snapshot read from another replica, fresh for `remainingMs` more (the rest of its window). */
export function fromData(
  d: SnapshotData,
  remainingMs: number,
  coalesceMs: number,
  now = Date.now(),
  bodies: Map<string, Encodable> = new Map(),
): Snapshot {
  return {
    serverTimestamp: d.serverTimestamp,
    fetchedAt: now - Math.max(0, coalesceMs - remainingMs),
    complete: true,
    modern: undefined,
    modernError: d.modernError === undefined ? undefined : new ShimError(502, 'UPSTREAM_BAD_RESPONSE', d.modernError),
    legacyBytes: d.legacyBytes,
    readLegacyBytes: d.legacyBytes ? undefined : d.readLegacyBytes,
    legacyUsers: d.legacyUsers,
    merged: undefined,
    bodies,
  };
}

/** A snapshot another replica published, with how much of its window is left. */
export interface PublishedSnapshot {
  data: SnapshotData;
  remainingMs: number;
}

/**
 * Cross-replica coordination (S1): at most one replica fetches a scope per window; the others
 * read its snapshot once, when it is published. Implemented on Redis; absent with a single replica.
 */
export interface ReplicaSnapshots {
  /** A snapshot another replica published in this window, if any. */
  get(scope: string): Promise<PublishedSnapshot | undefined>;
  /** Takes the scope's fetch lock for `ttlMs`; false when another replica holds it. */
  tryLock(scope: string, ttlMs: number): Promise<boolean>;
  /** Publishes a fetched snapshot for the `remainingMs` left of its window and releases the lock. */
  publish(scope: string, data: SnapshotData, remainingMs: number): Promise<void>;
  /** Releases the lock without publishing (the fetch failed). */
  release(scope: string): Promise<void>;
  /** Waits until another replica publishes (or gives up: undefined), woken by a notification. */
  waitFor(scope: string, timeoutMs: number): Promise<PublishedSnapshot | undefined>;
}

interface Slot {
  snapshot?: Snapshot;
  pending?: Promise<Snapshot>;
}

/**
 * X2: what a slot holds: the upstream bytes of its snapshot (where kept) and its modern entries
 * (compact: columns.ts). The answers built from it count against their own budget.
 */
function slotFootprint(slot: Slot): Footprint {
  const s = slot.snapshot;
  return { fixed: 1024 + presencesBytes(s?.modern), bytes: [s?.legacyBytes] };
}

/**
 * X2: what an answer body holds: its bytes, and room for their gzip, added when it is first sent
 * (a JSON presence answer's gzip is below half of it: test/budgeted.test.ts).
 */
export function bodyFootprint(body: Encodable): Footprint {
  return { fixed: 64, bytes: [body.raw], later: body.raw.length / 2 };
}

/** The in-process side of P9: one slot per scope, bounded in scopes and in bytes (X2). */
export class SnapshotHub {
  private readonly slots: LRUCache<string, Slot>;
  private readonly answersBudget: ByteBudget;
  /** Every fetch in flight, also one whose leader already has its answer (B7), for the drain (X9). */
  private readonly inFlight = new Set<Promise<Snapshot>>();

  constructor(
    readonly coalesceMs: number,
    maxScopes: number,
    private readonly clock: () => number,
    /** X2: bytes the kept snapshots may take (memory.snapshotsBytes; see slotFootprint). */
    maxBytes: number,
    /** X2: bytes the answer bodies built from snapshots and ledgers may take, all together (memory.answersBytes). */
    answersMaxBytes: number,
    /** X2: the shim's cap over all its budgets (memory.totalBytes). */
    pool?: MemoryPool,
  ) {
    this.answersBudget = new ByteBudget(answersMaxBytes, pool?.in('answers'));
    // A snapshot is of no use after its window: dropped then, so memory follows live realms.
    this.slots = budgetedLru(maxBytes, slotFootprint, {
      max: maxScopes,
      ttl: Math.max(coalesceMs, 1) * 2,
      ttlAutopurge: true,
      pool: pool?.in('snapshots'),
    });
  }

  /** An empty cache of answer bodies, within the hub's answers budget (X2). */
  bodies(): Map<string, Encodable> {
    return this.answersBudget.map(bodyFootprint);
  }

  /** X2: sizes the scope's slot again after its snapshot grew (legacy bytes read after it was kept). */
  resized(scope: string): void {
    const slot = this.slots.peek(scope);
    if (!slot?.snapshot || slot.pending) return;
    const ttl = this.slots.getRemainingTTL(scope);
    if (!(ttl > 0 && Number.isFinite(ttl))) return;
    // lru-cache sizes a value only when it is set anew: the same slot set again keeps its old size.
    this.slots.delete(scope);
    this.slots.set(scope, slot, { ttl });
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
    // Back under the window's expiry once the fetch settled; dropped when it holds nothing.
    const settle = () => {
      this.inFlight.delete(p);
      if (slot.pending === p) slot.pending = undefined;
      if (this.slots.peek(scope) !== slot) return;
      this.slots.delete(scope);
      // Sized again, now with its snapshot (X2); lru-cache sizes a value once per set.
      if (keep && slot.snapshot && this.coalesceMs > 0) this.slots.set(scope, slot);
    };
    const p = fetch().then(
      (snapshot) => {
        if (keep && this.coalesceMs > 0 && (!slot.snapshot || slot.snapshot.serverTimestamp <= snapshot.serverTimestamp)) {
          slot.snapshot = snapshot;
        }
        settle();
        return snapshot;
      },
      (e: unknown) => {
        settle();
        throw e;
      },
    );
    this.inFlight.add(p);
    if (this.coalesceMs > 0) {
      slot.pending = p;
      // P9: a fetch in flight stays the single flight however long it takes (the upstream
      // deadline bounds it, X3): expiring with the window would start a second one.
      this.slots.set(scope, slot, { ttl: 0 });
    }
    return p;
  }

  /**
   * X9: resolves once no fetch is in flight, or after `withinMs`. A refresh whose leader already
   * had its answer (B7) is work in flight too: cut by the drain, it would be lost, and the other
   * replicas would wait for its snapshot until their budget runs out.
   */
  async settled(withinMs: number): Promise<void> {
    const ends = Date.now() + withinMs;
    // A fetch that settles may have let another start (a waiter fetching for itself).
    while (this.inFlight.size > 0) {
      if (!(await within(Promise.allSettled(this.inFlight), ends - Date.now()))) return;
    }
  }
}

/** `p`'s value when it settles within `ms`, else undefined (a rejection within `ms` is thrown). */
export async function within<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), Math.max(0, ms));
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}
