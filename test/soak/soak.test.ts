import { expect, it } from 'vitest';
import { describeSoak, runSoak } from '../support/soak.js';

/**
 * The long soak (`npm run soak`): SOAK_CLIENTS simulated clients (default 500) of a
 * SOAK_USERS-user realm (default 10,000) for SOAK_SECONDS (default 60), mixed presence,
 * own-profile and pass-through traffic. No error the upstream did not cause; RSS after warm-up
 * grows less than 10%; sampled clients end with exactly the upstream's data (P6).
 */

const seconds = Number(process.env.SOAK_SECONDS ?? 60);
const clients = Number(process.env.SOAK_CLIENTS ?? 500);
const users = Number(process.env.SOAK_USERS ?? 10_000);
const era = process.env.SOAK_ERA === '7.0' ? '7.0' : '2.1';

it(
  `${clients} clients of a ${users}-user realm for ${seconds} s`,
  async () => {
    const r = await runSoak({ seconds, clients, users, era, sampleClients: 10 });
    console.log(describeSoak(r));
    expect(r.errorSamples).toEqual([]);
    expect(r.unexplainedErrors).toBe(0);
    expect(r.sampleMismatches).toEqual([]);
    expect(r.logProblems).toEqual([]);
    expect(r.rssGrowth, `RSS ${r.rssMiB.afterWarmup} MiB after warm-up, ${r.rssMiB.end} MiB at the end`).toBeLessThan(0.1);
  },
  (seconds + 120) * 1000,
);
