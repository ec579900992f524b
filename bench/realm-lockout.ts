import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { createLogger } from '../src/observability/logger.js';
import { createShim } from '../src/server.js';
import { startFake } from '../test/support/fake-zulip.js';
import { testConfig } from '../test/support/shim.js';

/**
 * X12's lockout figure: `npm run bench -- lockout [--seconds 40] [--attack-rate 20] [--realms 5]`.
 * A shim with the default new-realm rate in front of a Zulip 2.1 server with a realm per Host
 * (test/support/fake-zulip.ts). An attacker sends presence reports for a new made-up Host each,
 * `attack-rate` a second, with no credentials (and, in a second run, with credentials the
 * upstream accepts in every realm, from one address). After 10 s, `realms` real new realms
 * arrive, each from an address of its own (X-Forwarded-For from a trusted proxy), and their
 * users retry after the Retry-After they are given, as clients do. Prints, per run, how many of
 * the real realms were admitted before the attack ended and how long the first answer took.
 */

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== 'lockout'),
  options: { seconds: { type: 'string' }, 'attack-rate': { type: 'string' }, realms: { type: 'string' } },
  strict: true,
});
const seconds = Number(values.seconds ?? 40);
const attackRate = Number(values['attack-rate'] ?? 20);
const realms = Number(values.realms ?? 5);
const REAL_START_MS = 10_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function run(attackerAuthenticated: boolean): Promise<string> {
  const fake = await startFake({ era: '2.1' }); // a realm per Host
  for (const u of fake.humans()) fake.report(u.user_id, 'active');
  // Every client arrives through a proxy the shim trusts, which names the client's address.
  const config = testConfig(fake.url, { server: { trustProxy: ['127.0.0.1'] }, log: { level: 'warn' } });
  const shim = createShim({ config, log: createLogger('silent'), target: fake.url, upstreamId: fake.url });
  const { url } = await shim.listen(0, '127.0.0.1');
  const pool = new Pool(url, { connections: 64 });
  const presence = (host: string, address: string, auth: string | undefined) =>
    pool
      .request({
        method: 'POST',
        path: '/api/v1/users/me/presence',
        headers: {
          host,
          'x-forwarded-for': address,
          'content-type': 'application/x-www-form-urlencoded',
          ...(auth ? { authorization: auth } : {}),
        },
        body: 'status=active&last_update_id=-1',
      })
      .then(async (r) => {
        await r.body.dump();
        return { status: r.statusCode, retryAfter: Number(r.headers['retry-after'] ?? 1) };
      });

  const started = performance.now();
  const elapsed = () => performance.now() - started;
  const attackStatuses = new Map<number, number>();
  let attacking = true;
  const attack = (async () => {
    for (let i = 0; attacking; i++) {
      void presence(`a${i}.realm.test`, '198.51.100.7', attackerAuthenticated ? fake.auth(11) : undefined).then(
        (r) => attackStatuses.set(r.status, (attackStatuses.get(r.status) ?? 0) + 1),
        () => attackStatuses.set(0, (attackStatuses.get(0) ?? 0) + 1),
      );
      await sleep(1000 / attackRate);
    }
  })();

  await sleep(REAL_START_MS);
  const admittedAfterMs: Array<number | undefined> = [];
  const tries: number[] = [];
  await Promise.all(
    Array.from({ length: realms }, async (_, i) => {
      tries[i] = 0;
      const asked = elapsed();
      while (elapsed() < seconds * 1000) {
        tries[i]!++;
        const r = await presence(`real-${i}.realm.test`, `203.0.113.${10 + i}`, fake.auth(11));
        if (r.status === 200) {
          admittedAfterMs[i] = elapsed() - asked;
          return;
        }
        await sleep(r.retryAfter * 1000);
      }
    }),
  );
  // The attack lasts its whole time, whatever the real realms got.
  await sleep(Math.max(0, seconds * 1000 - elapsed()));
  attacking = false;
  await attack;
  await sleep(200);
  await pool.close();
  await shim.close();
  await fake.stop();
  const admitted = admittedAfterMs.filter((ms) => ms !== undefined);
  const slowest = admitted.length > 0 ? `${Math.max(...admitted).toFixed(0)} ms` : '–';
  const refused = tries.reduce((a, b) => a + b, 0) - admitted.length;
  const statuses = [...attackStatuses].map(([s, n]) => `${n}× ${s}`).join(', ');
  return (
    `${attackerAuthenticated ? 'authenticated' : 'unauthenticated'} flood (${attackRate}/s, one address): ` +
    `${admitted.length} of ${realms} real new realms admitted during the attack, the last after ${slowest}, ` +
    `${refused} of their tries refused (503); the attacker's requests: ${statuses}`
  );
}

const lines = [await run(false), await run(true)];
process.stdout.write(
  `X12 lockout: default new-realm rate, ${seconds} s of attack, real realms from ${REAL_START_MS / 1000} s\n${lines.join('\n')}\n`,
);
