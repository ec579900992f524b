import { describe, expect, it } from 'vitest';
import { Params } from '../src/http/body.js';
import { modernBodyInSteps } from '../src/presence/answers.js';
import { answer, createLedger, merge, type AnswerRequest, type LedgerState, type ModernPresence } from '../src/presence/ledger.js';
import { parsePresenceRequest } from '../src/presence/params.js';

/** B7: an answer built in steps is, byte for byte, the one a single JSON.stringify would make. */

const TS = 1_763_700_000.5;
const DAY = 86_400;

/** The fixture's users: sparse ids, in no particular order, several steps' worth. */
function presencesOf(users: number): Map<number, ModernPresence> {
  const presences = new Map<number, ModernPresence>();
  for (let i = users; i > 0; i--)
    presences.set(i * 7 + (i % 3), { active_timestamp: 1_763_000_000 + i * 13, idle_timestamp: 1_763_000_000 + i * 17 });
  return presences;
}

/** Every fifth user reported again, its idle_timestamp a second later. */
function changesOf(presences: Map<number, ModernPresence>): Map<number, ModernPresence> {
  return new Map([...presences].filter(([u]) => u % 5 === 0).map(([u, p]) => [u, { ...p, idle_timestamp: p.idle_timestamp + 1 }]));
}

/** Each user's last idle_timestamp in realm(users). */
function idleTimestamps(users: number): number[] {
  const presences = presencesOf(users);
  return [...new Map([...presences, ...changesOf(presences)]).values()].map((p) => p.idle_timestamp);
}

function realm(users: number): LedgerState {
  const presences = presencesOf(users);
  const ledger = merge(createLedger(1_000_000), { serverTimestamp: TS - 10, presences, complete: true });
  return merge(ledger, { serverTimestamp: TS, presences: new Map([...presences, ...changesOf(presences)]), complete: true });
}

function oneBlock(ledger: LedgerState, q: AnswerRequest, ignored: string[]): string {
  const a = answer(ledger, q);
  const extra = ignored.length ? `,"ignored_parameters_unsupported":${JSON.stringify(ignored)}` : '';
  return `{"result":"success","msg":"","server_timestamp":${JSON.stringify(q.serverTimestamp)},"presences":${JSON.stringify(a.presences)},"presence_last_update_id":${a.presenceLastUpdateId}${extra}}`;
}

describe('modern answers built in steps (B7)', () => {
  const everyone = 12_345;
  const ledger = realm(everyone);
  const middle = ledger.epoch + 100; // a delta of more than one step
  /** Users idle within the last 7 days, from the fixture alone (P12). */
  const withinWeek = idleTimestamps(everyone).filter((idle) => idle >= TS - 7 * DAY).length;
  /** How many users each answer holds: everyone, those of the last 7 days, more than a step's worth but not everyone, none. */
  const cases: Array<[string, Record<string, string>, (users: number) => void]> = [
    ['full', { status: 'active', last_update_id: '-1' }, (users) => expect(users).toBe(everyone)],
    [
      'full, history limited (P12)',
      { status: 'active', last_update_id: '-1', history_limit_days: '7' },
      (users) => expect([users, users < everyone]).toEqual([withinWeek, true]),
    ],
    [
      'delta',
      { status: 'active', last_update_id: String(middle) },
      (users) =>
        expect({ moreThanAStep: users > 8_192, notEveryone: users < everyone }).toEqual({ moreThanAStep: true, notEveryone: true }),
    ],
    [
      'delta with nothing new (P4: the id echoed)',
      { status: 'active', last_update_id: String(ledger.lastId) },
      (users) => expect(users).toBe(0),
    ],
    ['unknown parameters listed (P11)', { status: 'active', slim_presence: 'true', zzz: '1' }, (users) => expect(users).toBe(everyone)],
  ];
  it.each(cases)('%s', async (_name, form, holds) => {
    const request = parsePresenceRequest(new Params(Object.entries(form)));
    const q: AnswerRequest = { lastUpdateId: request.lastUpdateId, historyLimitDays: request.historyLimitDays, serverTimestamp: TS };
    const body = await modernBodyInSteps(ledger, q, request);
    const expected = oneBlock(ledger, q, request.ignored);
    expect(body.raw.toString('utf8')).toBe(expected);
    holds(Object.keys(JSON.parse(expected).presences).length);
  });
});

describe('P12 at the cut-off itself', () => {
  it('keeps a user idle exactly history_limit_days before server_timestamp, leaves out one a second older', () => {
    const cutoff = TS - 7 * DAY;
    const presences = new Map<number, ModernPresence>([
      [1, { active_timestamp: cutoff - 1, idle_timestamp: cutoff - 1 }],
      [2, { active_timestamp: cutoff, idle_timestamp: cutoff }],
      [3, { active_timestamp: cutoff + 1, idle_timestamp: cutoff + 1 }],
    ]);
    const ledger = merge(createLedger(1_000_000), { serverTimestamp: TS, presences, complete: true });
    const a = answer(ledger, { lastUpdateId: -1, historyLimitDays: 7, serverTimestamp: TS });
    expect(Object.keys(a.presences).sort()).toEqual(['2', '3']);
  });
});
