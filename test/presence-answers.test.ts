import { describe, expect, it } from 'vitest';
import { Params } from '../src/http/body.js';
import { modernBodyInSteps } from '../src/presence/answers.js';
import { answer, createLedger, merge, type AnswerRequest, type LedgerState, type ModernPresence } from '../src/presence/ledger.js';
import { parsePresenceRequest } from '../src/presence/params.js';

/** B7: an answer built in steps is, byte for byte, the one a single JSON.stringify would make. */

const TS = 1_763_700_000.5;

function realm(users: number): LedgerState {
  const presences = new Map<number, ModernPresence>();
  // Sparse ids, in no particular order, several steps' worth.
  for (let i = users; i > 0; i--)
    presences.set(i * 7 + (i % 3), { active_timestamp: 1_763_000_000 + i * 13, idle_timestamp: 1_763_000_000 + i * 17 });
  let ledger = merge(createLedger(1_000_000), { serverTimestamp: TS - 10, presences, complete: true });
  const changes = new Map<number, ModernPresence>(
    [...presences].filter(([u]) => u % 5 === 0).map(([u, p]) => [u, { ...p, idle_timestamp: p.idle_timestamp + 1 }]),
  );
  ledger = merge(ledger, { serverTimestamp: TS, presences: new Map([...presences, ...changes]), complete: true });
  return ledger;
}

function oneBlock(ledger: LedgerState, q: AnswerRequest, ignored: string[]): string {
  const a = answer(ledger, q);
  const extra = ignored.length ? `,"ignored_parameters_unsupported":${JSON.stringify(ignored)}` : '';
  return `{"result":"success","msg":"","server_timestamp":${JSON.stringify(q.serverTimestamp)},"presences":${JSON.stringify(a.presences)},"presence_last_update_id":${a.presenceLastUpdateId}${extra}}`;
}

describe('modern answers built in steps (B7)', () => {
  const ledger = realm(12_345);
  const middle = ledger.epoch + 100; // a delta of more than one step
  const cases: Array<[string, Record<string, string>]> = [
    ['full', { status: 'active', last_update_id: '-1' }],
    ['full, history limited (P12)', { status: 'active', last_update_id: '-1', history_limit_days: '7' }],
    ['delta', { status: 'active', last_update_id: String(middle) }],
    ['delta with nothing new (P4: the id echoed)', { status: 'active', last_update_id: String(ledger.lastId) }],
    ['unknown parameters listed (P11)', { status: 'active', slim_presence: 'true', zzz: '1' }],
  ];
  it.each(cases)('%s', async (_name, form) => {
    const request = parsePresenceRequest(new Params(Object.entries(form)));
    const q: AnswerRequest = { lastUpdateId: request.lastUpdateId, historyLimitDays: request.historyLimitDays, serverTimestamp: TS };
    const body = await modernBodyInSteps(ledger, q, request);
    const expected = oneBlock(ledger, q, request.ignored);
    expect(body.raw.toString('utf8')).toBe(expected);
    expect(Object.keys(JSON.parse(expected).presences).length).toBeGreaterThan(form.last_update_id === String(ledger.lastId) ? -1 : 5_000);
  });
});
