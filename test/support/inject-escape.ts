/**
 * Loaded with --import before the CLI (test/crash.test.ts): once the shim is up, lets an error
 * escape every handler the way a bug would, as ZCS_TEST_INJECT says: `exception` (thrown from
 * a timer) or `rejection` (a promise nobody waits on).
 */
const what = process.env.ZCS_TEST_INJECT;
const after = Number(process.env.ZCS_TEST_INJECT_AFTER_MS ?? 1000);

if (what === 'exception') {
  setTimeout(() => {
    throw new Error('injected: an exception no handler caught');
  }, after);
} else if (what === 'rejection') {
  setTimeout(() => {
    void Promise.reject(new Error('injected: a rejection nobody waited on'));
  }, after);
}
