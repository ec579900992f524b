import { setFlagsFromString } from 'node:v8';

/**
 * V8 settings for a shim process, made at start-up before any work (the CLI and the bench's
 * shim process alike).
 *
 * No memory reducer: V8's memory reducer runs extra full collections whenever an isolate's
 * allocation slows down, to give memory back to the system. A shim allocates in bursts (a
 * presence refresh each window, then little) and so set it off again and again, most of all
 * where replicas share the load: it was about half of what a second replica
 * added to one (measured with B8; commit 478f59b). The shim's memory is held to its byte budgets
 * (X2), not to what an idle heap hands back; the parse worker's isolates, made later, start
 * without it too.
 *
 * Heap growth held to HEAP_GROWING_PERCENT (X2): after each full collection V8 lets its heap grow
 * by a factor it picks from its collection speed, up to four times what is live, before it
 * collects again. With the budgets full that is hundreds of megabytes of garbage on top of them
 * (a flood of 5,000-user realms: 521 MiB peak RSS at V8's own factor, 433 MiB at 1.15 in the same
 * conditions; bench/RESULTS.md). The factor applies to the parse worker's isolates too. An
 * operator's own `--heap-growing-percent` on node's command line is left as given (0: V8's own
 * factor; NODE_OPTIONS does not take the flag).
 */
export const HEAP_GROWING_PERCENT = 15;

/** What tuneRuntime set, for the start-up log. */
export interface RuntimeTuning {
  /** The heap growing percent in force: the shim's, or the operator's own. */
  heapGrowingPercent: number | 'operator';
}

export function tuneRuntime(execArgv: readonly string[] = process.execArgv): RuntimeTuning {
  setFlagsFromString('--no-memory-reducer');
  const given = execArgv.some((a) => /^--heap[-_]growing[-_]percent\b/.test(a));
  if (given) return { heapGrowingPercent: 'operator' };
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  return { heapGrowingPercent: HEAP_GROWING_PERCENT };
}
