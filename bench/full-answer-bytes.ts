import { availableParallelism, loadavg } from 'node:os';
import { usersBytes } from '../src/presence/answers.js';
import { applyChange, createLedger, type LedgerState } from '../src/presence/ledger.js';
import { PresenceState } from '../src/presence/state.js';

/**
 * What the bytes-saved metric (presence_full_equivalent_bytes_total) costs per new ledger state:
 * a realm of N users, then a chain of states each one user's own report (P15) apart, as a busy
 * realm makes them. For each state, the users' part of the full modern answer counted as the
 * shim does (answers.ts usersBytes: per shard of the user table, each shard counted once) and by
 * a walk over every user. Prints the medians of 200 states.
 *
 *   node --import tsx bench/full-answer-bytes.ts [users]       (default 100000)
 */

const users = Number(process.argv[2] ?? 100_000);
const NOW_MS = 1_763_700_000_000;
const now = NOW_MS / 1000;

const POWERS_OF_TEN = Array.from({ length: 16 }, (_, i) => 10 ** i);
const digits = (n: number): number => {
  let d = 1;
  while (d < 16 && n >= POWERS_OF_TEN[d]!) d++;
  return d;
};
/** The same count, user by user. */
function walk(state: LedgerState): number {
  let bytes = 0;
  state.users.forEach((e, id) => {
    if (e.present) bytes += 43 + digits(id) + digits(e.active) + digits(e.idle);
  });
  return bytes;
}

const presences = new Map(
  Array.from({ length: users }, (_, i) => [i + 1, { active_timestamp: now - 1000 + (i % 997), idle_timestamp: now - 500 + (i % 991) }]),
);
let state = applyChange(
  createLedger(NOW_MS),
  { kind: 'observation', observation: { serverTimestamp: now, presences, complete: true } },
  NOW_MS,
);
const memo = new PresenceState(100);
await usersBytes(memo, state);

const byShard: number[] = [];
const byUser: number[] = [];
for (let i = 0; i < 200; i++) {
  const id = 1 + ((i * 7919) % users);
  const at = now + 1 + i;
  const report = {
    serverTimestamp: at,
    presences: new Map([[id, { active_timestamp: at, idle_timestamp: at }]]),
    complete: false,
    report: true,
  };
  state = applyChange(state, { kind: 'observation', observation: report }, NOW_MS + i);
  let started = performance.now();
  const counted = await usersBytes(memo, state);
  byShard.push(performance.now() - started);
  started = performance.now();
  if (walk(state) !== counted) throw new Error('the two counts differ');
  byUser.push(performance.now() - started);
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!.toFixed(3);
console.log(
  `Node ${process.version}, ${availableParallelism()} cores, load average ${loadavg()[0]!.toFixed(2)}; ${users} users, ` +
    `per new state one report apart: by shard ${median(byShard)} ms, every user ${median(byUser)} ms`,
);
