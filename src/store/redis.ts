import { randomBytes } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { Logger } from '../observability/logger.js';
import { applyChange, createLedger, type LedgerChange, type LedgerState, type Observation } from '../presence/ledger.js';
import { CodecError, decodeLedger, encodeLedger } from './codec.js';
import { RedisCacheBackend } from './redis-cache.js';
import { RedisConnection } from './redis-connection.js';
import { StoreUnavailableError, type PresenceStore } from './types.js';

/**
 * Realm ledgers in Redis, shared by every replica (S1).
 *
 * One string key per realm, `<prefix>presence:<realm>`: an 8-byte write token, then the ledger
 * (store/codec.ts). The epoch is part of the value, so a flushed or replaced Redis shows up as a
 * missing key and the next observation starts a new ledger with a new epoch above every id this
 * replica has seen: older ids then get full data, never an empty answer (P5).
 *
 * Writes are optimistic: read (a one-byte reply when this replica's copy is current), merge in
 * JS (ledger.ts stays the one place where ids are made), then a compare-and-set script writes
 * the result only if the token is still the one the merge started from; otherwise read again and
 * merge again, a bounded number of times. A script rather than
 * WATCH/MULTI because WATCH belongs to a connection, and this one connection is shared by every
 * request in the process. Observations for one realm are merged in batches, one write per batch,
 * so a busy realm costs one round trip per batch, not one per poll.
 */

export interface RedisStoreOptions {
  url: string;
  /** Prefix of every key (config `store.keyPrefix`). */
  keyPrefix: string;
  log: Logger;
  /** Counts failed store operations (`store_errors_total`). */
  storeErrors?: { inc(): void };
  /** A realm's ledger expires after this long without a write (refreshed on every write). */
  idleTtlMs?: number;
  /** Store calls fail after this long, so presence falls back to the upstream quickly. */
  commandTimeoutMs?: number;
  /** Decoded ledgers kept in this process, keyed by write token (not the truth, just a cache). */
  maxRealms?: number;
  /** Compare-and-set attempts per batch before giving up (StoreUnavailableError 'contention'). */
  maxAttempts?: number;
  clock?: () => number;
}

/** What this process last read or wrote for a realm; `state` undefined: a value it cannot read. */
interface Known {
  token: Buffer;
  state: LedgerState | undefined;
}

interface Pending {
  change: LedgerChange;
  resolve(s: LedgerState): void;
  reject(e: unknown): void;
}

const NO_TOKEN = Buffer.alloc(0);
const TOKEN_BYTES = 8;
const UNCHANGED = 1;

/** The value, or 1 when its token is the one the caller knows, or nil when absent. */
const READ_LUA = `
local t = redis.call('GETRANGE', KEYS[1], 0, ${TOKEN_BYTES - 1})
if t == '' and redis.call('EXISTS', KEYS[1]) == 0 then return false end
if ARGV[1] ~= '' and t == ARGV[1] then return ${UNCHANGED} end
return redis.call('GET', KEYS[1])`;

/** Writes ARGV[2] with expiry ARGV[3] ms iff the value's token is still ARGV[1] ('' = absent). */
const CAS_LUA = `
if redis.call('GETRANGE', KEYS[1], 0, ${TOKEN_BYTES - 1}) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1`;

interface StoreCommands {
  zcsReadLedgerBuffer(key: string, known: Buffer): Promise<Buffer | number | null>;
  zcsCasLedger(key: string, expected: Buffer, value: Buffer, ttlMs: number): Promise<number>;
}

export class RedisStore implements PresenceStore {
  readonly kind = 'redis' as const;
  readonly conn: RedisConnection;
  readonly cacheBackend: RedisCacheBackend;
  private readonly commands: StoreCommands;
  private readonly known: LRUCache<string, Known>;
  private readonly pending = new Map<string, Pending[]>();
  private readonly idleTtlMs: number;
  private readonly maxAttempts: number;
  /** The highest id this replica has seen: a new epoch starts above it, even if the clock lags (P5). */
  private highWater = 0;

  constructor(private readonly o: RedisStoreOptions) {
    this.idleTtlMs = o.idleTtlMs ?? 86_400_000;
    this.maxAttempts = o.maxAttempts ?? 8;
    this.conn = new RedisConnection({ url: o.url, log: o.log, storeErrors: o.storeErrors, commandTimeoutMs: o.commandTimeoutMs ?? 1_000 });
    this.conn.redis.defineCommand('zcsReadLedger', { numberOfKeys: 1, lua: READ_LUA });
    this.conn.redis.defineCommand('zcsCasLedger', { numberOfKeys: 1, lua: CAS_LUA });
    this.commands = this.conn.redis as unknown as StoreCommands;
    this.cacheBackend = new RedisCacheBackend(this.conn, `${o.keyPrefix}cache:`);
    this.known = new LRUCache({ max: o.maxRealms ?? 1_000 });
  }

  get keyPrefix(): string {
    return this.o.keyPrefix;
  }

  /**
   * The clock a new epoch is taken from: Redis's own (TIME, microseconds), shared by every
   * replica, so a ledger re-created after a flush starts above the ids of the one before even
   * when replicas' clocks disagree (P5). An injected clock (tests) wins.
   */
  private async epochClock(): Promise<number> {
    if (this.o.clock) return this.o.clock();
    const [sec, usec] = await this.conn.redis.time();
    return Number(sec) * 1000 + Number(usec) / 1000;
  }

  key(realm: string): string {
    return `${this.o.keyPrefix}presence:${realm}`;
  }

  async load(realm: string): Promise<LedgerState | undefined> {
    return (await this.conn.run(() => this.read(realm)))?.state;
  }

  peek(realm: string): LedgerState | undefined {
    return this.known.get(realm)?.state;
  }

  merge(realm: string, observation: Observation): Promise<LedgerState> {
    return this.apply(realm, { kind: 'observation', observation });
  }

  raiseCounter(realm: string, atLeast: number): Promise<LedgerState> {
    return this.apply(realm, { kind: 'counter', atLeast });
  }

  private apply(realm: string, change: LedgerChange): Promise<LedgerState> {
    return new Promise((resolve, reject) => {
      const queue = this.pending.get(realm);
      if (queue) {
        queue.push({ change, resolve, reject });
        return;
      }
      this.pending.set(realm, [{ change, resolve, reject }]);
      void this.drain(realm);
    });
  }

  async ping(): Promise<void> {
    await this.conn.run(() => this.conn.redis.ping());
  }

  async close(): Promise<void> {
    this.known.clear();
    await this.conn.close();
  }

  /** Commits the realm's waiting observations, one batch at a time, until none is left. */
  private async drain(realm: string): Promise<void> {
    for (;;) {
      const batch = this.pending.get(realm);
      if (!batch || batch.length === 0) break;
      this.pending.set(realm, []); // arrivals meanwhile wait for the next batch
      try {
        const states = await this.conn.run(
          () =>
            this.commit(
              realm,
              batch.map((p) => p.change),
            ),
          batch.length,
        );
        for (const [i, p] of batch.entries()) p.resolve(states[i]!);
      } catch (e) {
        for (const p of batch) p.reject(e);
      }
    }
    this.pending.delete(realm);
  }

  /**
   * Applies the changes in order to the stored ledger and writes the result once. Returns the
   * ledger after each change: every one of them is a state of the realm's single history, so
   * ids stay strictly increasing (P5, I7).
   */
  private async commit(realm: string, batch: LedgerChange[]): Promise<LedgerState[]> {
    // Read first: when this replica wrote last the reply is one byte; when another one did,
    // merging on a stale copy would be wasted work at 10,000 users.
    let current = await this.read(realm);
    for (let attempt = 1; ; attempt++) {
      // The epoch clock is read only when needed: a new ledger, or a counter raise to check (I6).
      const needsClock = !current?.state || batch.some((c) => c.kind === 'counter');
      const now = needsClock ? await this.epochClock() : 0;
      const base = current?.state ?? createLedger(now, this.highWater);
      const states: LedgerState[] = [];
      let next = base;
      for (const change of batch) {
        next = applyChange(next, change, now);
        states.push(next);
      }
      if (next === base && current?.state) return states; // nothing to write; base was read just now
      const token = randomBytes(TOKEN_BYTES);
      const value = Buffer.concat([token, encodeLedger(next)]);
      const written = await this.commands.zcsCasLedger(this.key(realm), current?.token ?? NO_TOKEN, value, this.idleTtlMs);
      if (written === 1) {
        this.remember(realm, { token, state: next });
        return states;
      }
      // Another replica wrote in between: merge again on its ledger.
      if (attempt >= this.maxAttempts) {
        for (let i = 0; i < batch.length; i++) this.o.storeErrors?.inc();
        throw new StoreUnavailableError(`presence state of a realm changed under ${attempt} attempts to write it`, 'contention');
      }
      await backoff(attempt);
      current = await this.read(realm);
    }
  }

  /** The realm's value now: the known one when unchanged (one small round trip), else decoded. */
  private async read(realm: string): Promise<Known | undefined> {
    const known = this.known.get(realm);
    const reply = await this.commands.zcsReadLedgerBuffer(this.key(realm), known?.token ?? NO_TOKEN);
    if (reply === UNCHANGED && known) return known;
    if (!Buffer.isBuffer(reply)) {
      this.known.delete(realm);
      return undefined;
    }
    const token = Buffer.from(reply.subarray(0, TOKEN_BYTES));
    let state: LedgerState | undefined;
    try {
      state = decodeLedger(reply.subarray(TOKEN_BYTES));
    } catch (e) {
      if (!(e instanceof CodecError)) throw e;
      // Not a ledger this shim wrote: treated as absent, and replaced by the next write (P5).
      this.o.log.warn({ realm, reason: e.message }, 'stored presence state unreadable; a new epoch will replace it');
      state = undefined;
    }
    const fresh = { token, state };
    this.remember(realm, fresh);
    return fresh;
  }

  private remember(realm: string, k: Known): void {
    if (k.state) this.highWater = Math.max(this.highWater, k.state.lastId);
    this.known.set(realm, k);
  }
}

/** A short random pause before another compare-and-set, so two replicas stop colliding. */
function backoff(attempt: number): Promise<void> {
  const ms = Math.random() * Math.min(2 ** attempt, 50);
  return new Promise((r) => setTimeout(r, ms));
}
