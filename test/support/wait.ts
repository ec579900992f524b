/**
 * `vi.waitFor` options for waiting on an event (a request reaching the fake upstream, a log
 * line): the wait ends as soon as it happens, so the timeout only bounds a failure. vitest's
 * default of one second is a timing assumption a cold clone on a busy machine breaks.
 */
export const EVENT_WAIT = { timeout: 10_000, interval: 10 } as const;
