import { expect, it } from 'vitest';
import { describeSoak, runSoak } from './support/soak.js';

/**
 * The soak in short (`npm run soak` runs the long one): 100 clients of a 10,000-user realm for
 * about 3 s, mixed presence, own-profile and pass-through traffic. No error the upstream did not
 * cause, and sampled clients end with exactly the upstream's data (P6). RSS and p99 are
 * reported, not asserted: 3 s is too short for either to mean much.
 */
it('100 clients of a 10,000-user realm for 3 s: no errors the upstream did not cause', async () => {
  const r = await runSoak({ seconds: 3, clients: 100, users: 10_000, coalesceMs: 300, sampleClients: 3 });
  console.log(describeSoak(r));
  expect(r.errorSamples).toEqual([]);
  expect(r.unexplainedErrors).toBe(0);
  expect(r.requests).toBeGreaterThan(100);
  expect(r.sampleMismatches).toEqual([]);
  expect(r.logProblems).toEqual([]);
}, 60_000);
