import os from 'node:os';
import { parseArgs } from 'node:util';
import { createLedger, merge, prepareMerge, rebasedMerge, type ModernPresence, type Observation } from '../src/presence/ledger.js';

/**
 * B7, issue 44: what the store does with a refresh's prepared merge when callers' own reports
 * (P15) reached the ledger while it was prepared: rebased over them (`rebasedMerge`) against
 * the whole observation merged again (`merge`, what the store did before). A realm of `users`,
 * a complete refresh with `changed` of them changed, `reports` one-user reports in between;
 * median of `rounds`, in this process, on whatever else the machine runs.
 *
 * `npm run bench -- rebase [--users 100000] [--changed 0.02] [--reports 50] [--rounds 5]`
 */

const { values: flags } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== 'rebase'),
  options: {
    users: { type: 'string' },
    changed: { type: 'string' },
    reports: { type: 'string' },
    rounds: { type: 'string' },
  },
  strict: true,
});
const users = Number(flags.users ?? 100_000);
const everyNth = Math.max(1, Math.round(1 / Number(flags.changed ?? 0.02)));
const reports = Number(flags.reports ?? 50);
const rounds = Number(flags.rounds ?? 5);

function snapshot(serverTimestamp: number, shift: number): Observation {
  const presences = new Map<number, ModernPresence>();
  for (let i = 0; i < users; i++) {
    const s = i % everyNth === 0 ? shift : 0;
    presences.set(i + 1, { active_timestamp: 1_000_000 + i + s, idle_timestamp: 1_000_000 + i + s });
  }
  return { serverTimestamp, presences, complete: true };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rebasedMs: number[] = [];
const mergedMs: number[] = [];
let base = merge(createLedger(Date.now()), snapshot(2_000_000, 0));
for (let r = 1; r <= rounds; r++) {
  const obs = snapshot(2_000_000 + 10 * r, r);
  const prepared = await prepareMerge(base, obs, async () => {});
  let now = base;
  for (let k = 0; k < reports; k++) {
    const user = 1 + ((k * 7_919) % users);
    const at = 2_000_000 + 10 * r + 1;
    now = merge(now, {
      serverTimestamp: at + 0.999,
      complete: false,
      report: true,
      presences: new Map([[user, { active_timestamp: at, idle_timestamp: at }]]),
    });
  }
  let t = performance.now();
  const rebased = rebasedMerge(now, obs, prepared);
  rebasedMs.push(performance.now() - t);
  t = performance.now();
  const full = merge(now, obs);
  mergedMs.push(performance.now() - t);
  if (!rebased || rebased.lastId !== full.lastId) throw new Error('the rebase is not the full merge');
  base = full;
}
const load = () =>
  os
    .loadavg()
    .map((v) => v.toFixed(2))
    .join(' / ');
process.stdout.write(
  `${users.toLocaleString('en-US')} users, 1 in ${everyNth} changed, ${reports} reports in between, ${rounds} rounds (load average ${load()}):\n` +
    `- prepared merge rebased: median ${median(rebasedMs).toFixed(1)} ms, max ${Math.max(...rebasedMs).toFixed(1)} ms\n` +
    `- merged again (before issue 44): median ${median(mergedMs).toFixed(1)} ms, max ${Math.max(...mergedMs).toFixed(1)} ms\n`,
);
