import { SnapshotHub } from '../../src/presence/snapshots.js';
import { MemoryStore } from '../../src/store/memory.js';
import { testConfig } from './shim.js';

/** The default byte budgets, from the configuration (config/default.json through the schema). */
export const BUDGETS = testConfig('http://127.0.0.1:1').memory;

/** An in-memory store of `maxRealms` realms with the default ledger budget. */
export const memoryStore = (maxRealms: number, clock?: () => number) =>
  new MemoryStore({ maxRealms, maxBytes: BUDGETS.ledgersBytes }, clock);

/** A snapshot hub with the default budgets unless given. */
export const snapshotHub = (
  coalesceMs: number,
  maxScopes: number,
  clock: () => number = Date.now,
  maxBytes = BUDGETS.snapshotsBytes,
  answersMaxBytes = BUDGETS.answersBytes,
) => new SnapshotHub(coalesceMs, maxScopes, clock, maxBytes, answersMaxBytes);

/** What a Redis store keeps decoded, by default. */
export const REDIS_STORE_BUDGETS = { maxRealms: testConfig('http://127.0.0.1:1').presence.maxRealms, maxBytes: BUDGETS.ledgersBytes };
