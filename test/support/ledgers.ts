import type { LedgerEntry, LedgerState } from '../../src/presence/ledger.js';

/** A realistic realm: ids near a clock epoch, server timestamps in seconds, mostly shared. */
export function realisticLedger(users: number, seed = 1): LedgerState {
  let x = seed;
  const rand = (n: number) => {
    x = (x * 1_103_515_245 + 12_345) % 2 ** 31;
    return x % n;
  };
  const epoch = 1_763_700_000_000 * 1000;
  const lastId = epoch + users * 3;
  const snapshots = Array.from({ length: 40 }, (_, i) => 1_763_700_000 + i * 60 + 0.123456);
  const map = new Map<number, LedgerEntry>();
  for (let i = 0; i < users; i++) {
    const seenAt = snapshots[rand(snapshots.length)]!;
    const active = Math.floor(seenAt) - rand(14 * 86_400);
    map.set(8 + i, {
      active,
      idle: active + rand(3) * rand(600),
      seenAt,
      changedAt: lastId - rand(users * 3),
      present: rand(10) > 0,
    });
  }
  const merges = snapshots.slice(-32).map((ts, i) => [ts, lastId - 32 + i] as const);
  return { epoch, lastId, users: map, raised: [], merges, completeAt: snapshots[snapshots.length - 1] ?? 0 };
}

/** A state with its users as a plain Map: states compare by what they hold, whatever the table's shape. */
export function plainLedger(s: LedgerState | undefined): LedgerState | undefined {
  return s && { ...s, users: new Map(s.users) };
}
