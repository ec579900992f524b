import { randomBytes } from 'node:crypto';
import type { MemoryPool } from '../cache/memory-pool.js';
import type { LRUCache } from 'lru-cache';
import { budgetedLru } from '../cache/budgeted.js';
import { ledgerFootprint } from './memory.js';
import type { Logger } from '../observability/logger.js';
import {
  applyChange,
  changesFrom,
  createLedger,
  type LedgerChange,
  type LedgerState,
  type Observation,
  type PreparedMerge,
  withChanges,
} from '../presence/ledger.js';
import { CodecError, decodeLedger, encodeLedger } from './codec.js';
import { RedisCacheBackend } from './redis-cache.js';
import { RedisConnection, type RedisTarget } from './redis-connection.js';
import { redisKey } from './redis-keys.js';
import type { PresenceStore } from '../presence/ledger-store.js';
import { StoreUnavailableError } from './types.js';

/**
 * Realm ledgers in Redis, shared by every replica (S1).
 *
 * One string key per realm, `<prefix>{<realm>}:presence` (redis-keys.ts): an 8-byte write token,
 * the run_id of the Redis server that wrote it (its stamp), then the ledger (store/codec.ts). The
 * epoch is part of the value, so a flushed or replaced Redis shows up as a missing key and the
 * next observation starts a new ledger with a new epoch above every id this replica has seen:
 * older ids then get full data, never an empty answer (P5).
 *
 * Failover (Sentinel, Redis Cluster) and restart: a value stamped by another server than the one
 * answering came to it by replication or from disk, and may lag what was written and answered
 * before (asynchronous replication, `appendfsync everysec`): ids issued since were lost with the
 * writes. Such a ledger is not vouched for: it reads as absent, and the next write replaces it
 * with a new epoch from TIME (microseconds) above its lastId and every id this replica has seen,
 * so every id issued before gets full data and every id issued after is higher (P5, P6, X1). The
 * stamp is checked by the scripts themselves (INFO server), on the server that runs them, so no
 * command can slip through between a failover and this process noticing it.
 *
 * Changes, published once: beside the value, `<prefix>{<realm>}:presence-changes`
 * holds the last few writes' changes, newest first, each as (token before, token after, the
 * ledger with only the users that write changed: ledger.ts `changesFrom`). A replica whose copy
 * is a few writes behind reads just those and applies them (`withChanges`) instead of decoding
 * the realm's whole ledger and sorting its delta index again; one that missed more, a cold
 * start, or a value from another server (the stamp check comes first) reads the whole value.
 * A write that starts a new epoch drops the list, so no chain crosses epochs or failovers.
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
  /** One Redis, a Sentinel-managed primary or a Redis Cluster (redis-connection.ts); `url` is short for one Redis. */
  target?: RedisTarget | undefined;
  url?: string | undefined;
  /** Prefix of every key (config `store.keyPrefix`). */
  keyPrefix: string;
  log: Logger;
  /** Counts failed store operations (`store_errors_total`). */
  storeErrors?: { inc(): void };
  /** Decoded ledgers kept in this process, keyed by write token (not the truth, just a cache; presence.maxRealms). */
  maxRealms: number;
  /** X2: bytes the decoded ledger copies of this replica may take (memory.ledgersBytes; see ledgerFootprint). */
  maxBytes: number;
  /** X2: the shim's cap over all its budgets (memory.totalBytes; cache/memory-pool.ts). */
  pool?: MemoryPool | undefined;
  clock?: () => number;
}

/**
 * What this process last read or wrote for a realm: the value's head (token and stamp) and its
 * ledger; `state` undefined: a value it cannot read, or one it does not vouch for (`lastId` then
 * holds its counter, if readable, for the next epoch to start above).
 */
interface Known {
  head: Buffer;
  state: LedgerState | undefined;
  lastId?: number | undefined;
}

interface Pending {
  change: LedgerChange;
  resolve(s: LedgerState): void;
  reject(e: unknown): void;
}

const NO_TOKEN = Buffer.alloc(0);
const TOKEN_BYTES = 8;
/** A Redis run_id: 40 hex characters, new at every start of a server process. */
const STAMP_BYTES = 40;
const HEAD_BYTES = TOKEN_BYTES + STAMP_BYTES;
const UNSTAMPED = Buffer.alloc(STAMP_BYTES);
const UNCHANGED = 1;
const CHANGED = 2;
/**
 * A realm's ledger expires after this long without a write (each write sets it again): a realm
 * nobody polls for a day leaves Redis, and its next poll starts a new epoch (full data once, P5).
 */
export const LEDGER_IDLE_TTL_MS = 86_400_000;
/**
 * X12: a realm taken on is remembered this long after it was last marked (each replica that
 * serves it marks it again hourly, realm-admission.ts), so a realm in use is never new again to
 * a restarted or added replica; one unused for longer is, once.
 */
export const ADMITTED_TTL_MS = 30 * 86_400_000;
/** Compare-and-set attempts per batch before giving up (StoreUnavailableError 'contention'). */
const WRITE_ATTEMPTS = 8;
/** Writes whose changes are kept for replicas a little behind. */
const CHANGES_KEPT = 8;
/** A change record: the token it applies to, the token it makes, then the changes (codec.ts). */
const CHANGE_HEAD_BYTES = 2 * TOKEN_BYTES;

/** The answering server's run_id, in Lua. */
const SERVER_LUA = `local server = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')`;

/**
 * The value, or 1 when its token is the one the caller knows, or nil when absent; {0, value}
 * when another server stamped it (a failover or restart since it was written); {2, head,
 * records…} (newest first) when the change records in KEYS[2] lead from the caller's token to
 * the value's.
 */
const READ_LUA = `
local head = redis.call('GETRANGE', KEYS[1], 0, ${HEAD_BYTES - 1})
if head == '' and redis.call('EXISTS', KEYS[1]) == 0 then return false end
${SERVER_LUA}
if string.sub(head, ${TOKEN_BYTES + 1}) ~= server then return {0, redis.call('GET', KEYS[1])} end
if ARGV[1] ~= '' then
  local want = string.sub(head, 1, ${TOKEN_BYTES})
  if want == ARGV[1] then return ${UNCHANGED} end
  local chain = {2, head}
  for i = 0, ${CHANGES_KEPT - 1} do
    local record = redis.call('LINDEX', KEYS[2], i)
    if not record or string.sub(record, ${TOKEN_BYTES + 1}, ${CHANGE_HEAD_BYTES}) ~= want then break end
    chain[#chain + 1] = record
    want = string.sub(record, 1, ${TOKEN_BYTES})
    if want == ARGV[1] then return chain end
  end
end
return redis.call('GET', KEYS[1])`;

/**
 * Writes ARGV[2] with expiry ARGV[3] ms, stamped with this server's run_id, iff the value's head
 * is still ARGV[1] ('' = absent) and, unless ARGV[4] is '1' (a new epoch replaces the value),
 * was stamped by this server. Pushes the change record ARGV[5] onto KEYS[2], or drops that list
 * when there is none ('': a new ledger, whose history starts here). Returns the stamp written, or 0.
 */
const CAS_LUA = `
local head = redis.call('GETRANGE', KEYS[1], 0, ${HEAD_BYTES - 1})
if head ~= ARGV[1] then return 0 end
${SERVER_LUA}
if ARGV[4] ~= '1' and head ~= '' and string.sub(head, ${TOKEN_BYTES + 1}) ~= server then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('SETRANGE', KEYS[1], ${TOKEN_BYTES}, server)
if ARGV[5] == '' then
  redis.call('DEL', KEYS[2])
else
  redis.call('LPUSH', KEYS[2], ARGV[5])
  redis.call('LTRIM', KEYS[2], 0, ${CHANGES_KEPT - 1})
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return server`;

type ReadReply = Buffer | number | null | [number, ...Buffer[]];

interface StoreCommands {
  zcsReadLedgerBuffer(key: string, changesKey: string, known: Buffer): Promise<ReadReply>;
  zcsCasLedgerBuffer(
    key: string,
    changesKey: string,
    expected: Buffer,
    value: Buffer,
    ttlMs: number,
    newEpoch: string,
    changes: Buffer,
  ): Promise<Buffer | number>;
}

export class RedisStore implements PresenceStore {
  readonly kind = 'redis' as const;
  readonly conn: RedisConnection;
  readonly cacheBackend: RedisCacheBackend;
  private readonly commands: StoreCommands;
  private readonly known: LRUCache<string, Known>;
  private readonly pending = new Map<string, Pending[]>();
  /** The highest id this replica has seen: a new epoch starts above it, even if the clock lags (P5). */
  private highWater = 0;

  constructor(private readonly o: RedisStoreOptions) {
    this.conn = new RedisConnection({ target: o.target, url: o.url, log: o.log, storeErrors: o.storeErrors });
    this.conn.redis.defineCommand('zcsReadLedger', { numberOfKeys: 2, lua: READ_LUA });
    this.conn.redis.defineCommand('zcsCasLedger', { numberOfKeys: 2, lua: CAS_LUA });
    this.commands = this.conn.redis as unknown as StoreCommands;
    this.cacheBackend = new RedisCacheBackend(this.conn, o.keyPrefix);
    // X2: the decoded copies are bounded in bytes too (a realm of 100k users is megabytes).
    this.known = budgetedLru(o.maxBytes, (k) => ({ fixed: 256, bytes: [k.head], inner: [k.state && ledgerFootprint(k.state)] }), {
      max: o.maxRealms,
      pool: o.pool?.in('ledgers'),
    });
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
    return redisKey(this.o.keyPrefix, 'presence', realm);
  }

  /** X12: whether the realm was taken on (same slot as its ledger). */
  admittedKey(realm: string): string {
    return redisKey(this.o.keyPrefix, 'admitted', realm);
  }

  /** One round trip that also keeps a known realm remembered for another ADMITTED_TTL_MS. */
  async isAdmitted(realm: string): Promise<boolean> {
    return (await this.conn.run(() => this.conn.redis.pexpire(this.admittedKey(realm), ADMITTED_TTL_MS))) === 1;
  }

  async admit(realm: string): Promise<void> {
    await this.conn.run(() => this.conn.redis.set(this.admittedKey(realm), '1', 'PX', ADMITTED_TTL_MS));
  }

  /** The realm's recent change records (same slot as its ledger). */
  changesKey(realm: string): string {
    return redisKey(this.o.keyPrefix, 'presence-changes', realm);
  }

  async load(realm: string): Promise<LedgerState | undefined> {
    return (await this.conn.run(() => this.read(realm)))?.state;
  }

  peek(realm: string): LedgerState | undefined {
    return this.known.get(realm)?.state;
  }

  merge(realm: string, observation: Observation, prepared?: PreparedMerge): Promise<LedgerState> {
    return this.apply(realm, { kind: 'observation', observation, prepared });
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
      // No ledger it vouches for: a new epoch above every id seen, the unvouched value's too (P5).
      const base = current?.state ?? createLedger(now, Math.max(this.highWater, current?.lastId ?? 0));
      const states: LedgerState[] = [];
      let next = base;
      for (const change of batch) {
        next = applyChange(next, change, now);
        states.push(next);
      }
      if (next === base && current?.state) return states; // nothing to write; base was read just now
      const token = randomBytes(TOKEN_BYTES);
      const encoded = encodeLedger(next);
      const value = Buffer.concat([token, UNSTAMPED, encoded]);
      const replaces = current !== undefined && current.state === undefined ? '1' : '';
      const changes = current?.state ? changeRecord(current.head, token, current.state, next, encoded.length) : NO_TOKEN;
      const stamp = await this.commands.zcsCasLedgerBuffer(
        this.key(realm),
        this.changesKey(realm),
        current?.head ?? NO_TOKEN,
        value,
        LEDGER_IDLE_TTL_MS,
        replaces,
        changes,
      );
      if (Buffer.isBuffer(stamp)) {
        this.remember(realm, { head: Buffer.concat([token, stamp]), state: next });
        return states;
      }
      // Another replica wrote in between: merge again on its ledger.
      if (attempt >= WRITE_ATTEMPTS) {
        for (let i = 0; i < batch.length; i++) this.o.storeErrors?.inc();
        throw new StoreUnavailableError(`presence state of a realm changed under ${attempt} attempts to write it`, 'contention');
      }
      await backoff(attempt);
      current = await this.read(realm);
    }
  }

  /**
   * The realm's value now: the known one when unchanged (one small round trip), the known one
   * with the changes written since applied when Redis still has them all, else decoded whole.
   */
  private async read(realm: string): Promise<Known | undefined> {
    const known = this.known.get(realm);
    const knownToken = known?.head.subarray(0, TOKEN_BYTES) ?? NO_TOKEN;
    let reply = await this.commands.zcsReadLedgerBuffer(this.key(realm), this.changesKey(realm), knownToken);
    if (reply === UNCHANGED && known) return known;
    if (Array.isArray(reply) && reply[0] === CHANGED) {
      const applied = known?.state && this.applyRecords(known.state, knownToken, reply.slice(1) as Buffer[]);
      if (applied) {
        this.remember(realm, applied);
        return applied;
      }
      // Not of the copy this process holds after all: the whole value, as for a cold start.
      reply = await this.commands.zcsReadLedgerBuffer(this.key(realm), this.changesKey(realm), NO_TOKEN);
    }
    const foreign = Array.isArray(reply);
    const value = Array.isArray(reply) ? reply[1] : reply;
    if (!Buffer.isBuffer(value)) {
      this.known.delete(realm);
      return undefined;
    }
    const head = Buffer.from(value.subarray(0, HEAD_BYTES));
    let state: LedgerState | undefined;
    try {
      state = decodeLedger(value.subarray(HEAD_BYTES));
    } catch (e) {
      if (!(e instanceof CodecError)) throw e;
      // Not a ledger this shim wrote: treated as absent, and replaced by the next write (P5).
      this.o.log.warn({ realm, reason: e.message }, 'stored presence state unreadable; a new epoch will replace it');
      state = undefined;
    }
    if (foreign) {
      // Written before a failover or restart: it may lag ids already answered (P5, X1).
      if (state) this.o.log.info({ realm }, 'presence state from before a Redis failover or restart; a new epoch replaces it');
      const fresh = { head, state: undefined, lastId: state?.lastId };
      this.highWater = Math.max(this.highWater, state?.lastId ?? 0);
      this.known.delete(realm);
      return fresh;
    }
    const fresh = { head, state };
    this.remember(realm, fresh);
    return fresh;
  }

  /**
   * The known state with change records applied (newest first as Redis sends them), or
   * undefined when they do not lead from it (then the whole value is read).
   */
  private applyRecords(state: LedgerState, token: Buffer, [head, ...records]: Buffer[]): Known | undefined {
    let next: LedgerState | undefined = state;
    let at = token;
    for (let i = records.length - 1; i >= 0 && next; i--) {
      const record = records[i]!;
      if (!record.subarray(0, TOKEN_BYTES).equals(at)) return undefined;
      at = record.subarray(TOKEN_BYTES, CHANGE_HEAD_BYTES);
      try {
        next = withChanges(next, decodeLedger(record.subarray(CHANGE_HEAD_BYTES)));
      } catch (e) {
        if (!(e instanceof CodecError)) throw e;
        return undefined;
      }
    }
    if (!next || !head?.subarray(0, TOKEN_BYTES).equals(at)) return undefined;
    return { head: Buffer.from(head), state: next };
  }

  private remember(realm: string, k: Known): void {
    if (k.state) this.highWater = Math.max(this.highWater, k.state.lastId);
    this.known.set(realm, k);
  }
}

/** Below this size a ledger's changes are always kept, however much of it they are. */
const SMALL_LEDGER_BYTES = 16_384;

/**
 * The change record of a write from `base` (value head `baseHead`) to `next` (token `token`),
 * or none when the changes of a large ledger would take more than half of it: reading the
 * whole value is then hardly dearer, and Redis keeps less.
 */
function changeRecord(baseHead: Buffer, token: Buffer, base: LedgerState, next: LedgerState, valueBytes: number): Buffer {
  const changes = encodeLedger(changesFrom(base, next));
  if (valueBytes > SMALL_LEDGER_BYTES && changes.length > valueBytes / 2) return NO_TOKEN;
  return Buffer.concat([baseHead.subarray(0, TOKEN_BYTES), token, changes]);
}

/** A short random pause before another compare-and-set, so two replicas stop colliding. */
function backoff(attempt: number): Promise<void> {
  const ms = Math.random() * Math.min(2 ** attempt, 50);
  return new Promise((r) => setTimeout(r, ms));
}
