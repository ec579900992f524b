import type { IncomingMessage } from 'node:http';
import { parseArgs } from 'node:util';
import { CHANGE_IDS } from '../src/changes/index.js';
import { clientRequestCounter } from '../src/observability/client-requests.js';
import { PendingCounts } from '../src/observability/label-children.js';
import { recordChanges, recordFacts } from '../src/observability/request-facts.js';

/**
 * The client_requests_total hook (src/observability/client-requests.ts), run when every client
 * request's answer closes, alone: `npm run bench -- client-requests [--runs 7]`. Three kinds of
 * request: passed through (no facts: the hot path, B4), answered by a handler that applied no
 * change (its level recorded), and one that applied three. For each, the best and the median of
 * `runs` rounds of a million calls, in ns a request (this process's CPU time).
 */

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== 'client-requests'),
  options: { runs: { type: 'string' } },
  strict: true,
});
const runs = Number(values.runs ?? 7);
const CALLS = 1_000_000;
const BROWSER = 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0';

const request = () => ({ headers: { host: 'chat.example.com', 'user-agent': BROWSER } }) as unknown as IncomingMessage;

function kinds(): Record<string, IncomingMessage> {
  const passedThrough = request();
  const answered = request();
  recordFacts(answered).featureLevel = 185;
  const changed = request();
  recordFacts(changed).featureLevel = 0;
  recordChanges(changed, ['presence_last_update_id', 'presence_modern_format', 'presence_history_limit_days']);
  return { 'passed through': passedThrough, 'answered, no change': answered, 'three changes': changed };
}

function round(req: IncomingMessage): number {
  const count = clientRequestCounter(new PendingCounts(['client', 'upstream_level', 'change']), CHANGE_IDS);
  const start = process.cpuUsage();
  for (let i = 0; i < CALLS; i++) count(req);
  const used = process.cpuUsage(start);
  return ((used.user + used.system) * 1000) / CALLS;
}

for (const [kind, req] of Object.entries(kinds())) {
  round(req); // warm up
  const ns = Array.from({ length: runs }, () => round(req)).sort((a, b) => a - b);
  const median = ns[Math.floor(ns.length / 2)]!;
  process.stdout.write(`${kind.padEnd(20)} best ${ns[0]!.toFixed(1)} ns, median ${median.toFixed(1)} ns a request\n`);
}
