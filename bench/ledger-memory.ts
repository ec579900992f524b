import { createLedger, merge, type ModernPresence, type LedgerState } from '../src/presence/ledger.js';
import { MemoryStore } from '../src/store/memory.js';
import { loadConfig } from '../src/config/index.js';

/** The default budgets, as the shim runs with them. */
const defaults = loadConfig([], {}, { needsUpstream: false }).config;

/**
 * B5: heap held by one realm's presence ledger, per user. Run with --expose-gc (and
 * --single-threaded, for a figure that does not depend on when V8 optimises) in a process of
 * its own: the observation is built first, then the heap is measured (after full GCs) before
 * and after merging it into a new ledger, and again after a steady-state merge (2 % of the
 * users changed). Prints one JSON line.
 * argv: users
 */

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc');
const n = Number(process.argv[2] ?? 10_000);

/** The JS heap and the typed arrays' backing stores (the ledger keeps its users in columns). */
function heap(): number {
  for (let i = 0; i < 3; i++) gc!();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

// Timestamps as a 2.1 realm has them: seconds around now, each user different.
const now = Math.floor(Date.now() / 1000);
function observation(changedFraction: number, at: number): Map<number, ModernPresence> {
  const m = new Map<number, ModernPresence>();
  for (let i = 0; i < n; i++) {
    const changed = i < n * changedFraction;
    const idle = now - ((i * 7919) % (13 * 86_400)) + (changed ? at - now : 0);
    m.set(10 + i, { active_timestamp: idle - (i % 3) * 60, idle_timestamp: idle });
  }
  return m;
}

const first = observation(0, now);
const second = observation(0.02, now + 60);
const before = heap();
let state: LedgerState = merge(createLedger(), { serverTimestamp: now + 0.5, presences: first, complete: true });
const afterFirst = heap();
state = merge(state, { serverTimestamp: now + 60.5, presences: second, complete: true });
const afterSteady = heap();

// The same through the in-memory store the shim uses by default.
const store = new MemoryStore({ maxRealms: 1000, maxBytes: defaults.memory.ledgersBytes });
const beforeStore = heap();
await store.merge('bench|realm', { serverTimestamp: now + 0.5, presences: first, complete: true });
await store.merge('bench|realm', { serverTimestamp: now + 60.5, presences: second, complete: true });
const afterStore = heap();

process.stdout.write(
  `${JSON.stringify({
    users: n,
    ledgerUsers: state.users.size,
    bytesFirst: afterFirst - before,
    bytesSteady: afterSteady - before,
    bytesStore: afterStore - beforeStore,
    bytesPerUser: (afterSteady - before) / n,
    bytesPerUserStore: (afterStore - beforeStore) / n,
    keep: [first.size, second.size, state.lastId > 0, (await store.load('bench|realm'))?.users.size],
  })}\n`,
);
