/**
 * Loaded with --import before the CLI (test/crash.test.ts). On SIGUSR2 — sent by the test once
 * the shim is listening — lets an error escape every handler the way a bug would, as
 * ZCS_TEST_INJECT says: `exception` (thrown from a timer) or `rejection` (a promise nobody
 * waits on).
 */
const what = process.env.ZCS_TEST_INJECT;

process.on('SIGUSR2', () => {
  setTimeout(() => {
    if (what === 'exception') throw new Error('injected: an exception no handler caught');
    if (what === 'rejection') void Promise.reject(new Error('injected: a rejection nobody waited on'));
  }, 0);
});
