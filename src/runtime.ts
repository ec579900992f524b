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
 */
export function tuneRuntime(): void {
  setFlagsFromString('--no-memory-reducer');
}
