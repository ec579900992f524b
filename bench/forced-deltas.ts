import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { startFake, type Era, type FakeZulip } from '../test/support/fake-zulip.js';
import { startShim, type RunningShim } from '../test/support/shim.js';

/**
 * Issue 43's forced-delta run (X1, I6): does one caller's made-up id cost everyone else?
 * `node --import tsx bench/forced-deltas.ts [--users 5000] [--victims 20] [--rounds 30]
 *   [--changes 10] [--era 7.0] [--redis]`
 *
 * A realm of `users` users on the fake upstream (test/support/fake-zulip.ts). Each round is one
 * second of the upstream's time: `changes` users report, then `victims` clients poll with the
 * presence_last_update_id of their previous answer (coalesceMs 0: every poll reads the upstream).
 * In the attacked phase one more authenticated caller polls first in every round with a made-up
 * id the clock allows (the time in µs − 2000), as in the issue. Printed for both phases: users
 * and bytes per victim delta (mean and largest), answers whose id went below the victim's, and
 * this process's CPU (the shim, the fake and the clients: the same work but for the attack).
 * `--redis`: the shim's store is Redis (REDIS_URL, default redis://127.0.0.1:6379).
 */

const { values: flags } = parseArgs({
  options: {
    users: { type: 'string' },
    victims: { type: 'string' },
    rounds: { type: 'string' },
    changes: { type: 'string' },
    era: { type: 'string' },
    redis: { type: 'boolean' },
  },
  strict: true,
});
const users = Number(flags.users ?? 5_000);
const victims = Number(flags.victims ?? 20);
const rounds = Number(flags.rounds ?? 30);
const changes = Number(flags.changes ?? 10);
const era = (flags.era ?? '7.0') as Era;
const redisUrl = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const agent = new Agent({ connections: victims + 2 });

interface Phase {
  deltas: number;
  users: number;
  bytes: number;
  mostUsers: number;
  mostBytes: number;
  backwards: number;
  cpuMs: number;
}

async function poll(shim: RunningShim, fake: FakeZulip, user: number, lastUpdateId: number): Promise<{ text: string; id: number }> {
  const res = await request(`${shim.url}/api/v1/users/me/presence`, {
    method: 'POST',
    headers: { host: 'chat.example.com', authorization: fake.auth(user), 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ status: 'active', last_update_id: String(lastUpdateId) }).toString(),
    dispatcher: agent,
  });
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`poll answered ${res.statusCode}: ${text.slice(0, 200)}`);
  return { text, id: (JSON.parse(text) as { presence_last_update_id: number }).presence_last_update_id };
}

async function phase(attacked: boolean): Promise<Phase> {
  const fake = await startFake({ era, users });
  const humans = fake.humans().map((u) => u.user_id);
  for (const u of humans) fake.report(u, 'active');
  // Past the upstream's 55 s between writes of a row (7.0+): every report in a round is a change.
  fake.advance(120);
  const keyPrefix = `bench-forced-deltas-${process.pid}-${attacked}:`;
  const store = flags.redis ? { redisUrl, keyPrefix } : {};
  const shim = await startShim(fake.url, { presence: { coalesceMs: 0 }, store, log: { level: 'silent' } });
  const attacker = humans[0]!;
  const clients = humans.slice(1, 1 + victims).map((user) => ({ user, id: -1 }));
  const out: Phase = { deltas: 0, users: 0, bytes: 0, mostUsers: 0, mostBytes: 0, backwards: 0, cpuMs: 0 };
  try {
    // Every victim starts from a full answer of its own.
    for (const c of clients) c.id = (await poll(shim, fake, c.user, -1)).id;
    const cpu = process.cpuUsage();
    let next = 1 + victims;
    for (let round = 0; round < rounds; round++) {
      fake.advance(1);
      for (let i = 0; i < changes; i++) fake.report(humans[next++ % humans.length]!, i % 3 === 0 ? 'idle' : 'active');
      if (attacked) await poll(shim, fake, attacker, Date.now() * 1000 - 2000);
      await Promise.all(
        clients.map(async (c) => {
          const { text, id } = await poll(shim, fake, c.user, c.id);
          const shown = Object.keys((JSON.parse(text) as { presences: object }).presences).length;
          if (id < c.id) out.backwards++;
          c.id = id;
          out.deltas++;
          out.users += shown;
          out.bytes += Buffer.byteLength(text);
          out.mostUsers = Math.max(out.mostUsers, shown);
          out.mostBytes = Math.max(out.mostBytes, Buffer.byteLength(text));
        }),
      );
    }
    const used = process.cpuUsage(cpu);
    out.cpuMs = (used.user + used.system) / 1000;
  } finally {
    await shim.close();
    await fake.stop();
  }
  return out;
}

const quiet = await phase(false);
const attacked = await phase(true);
const row = (name: string, p: Phase) =>
  `${name.padEnd(16)} ${(p.users / p.deltas).toFixed(1).padStart(8)} ${p.mostUsers.toString().padStart(6)} ${(p.bytes / p.deltas).toFixed(0).padStart(10)} ${p.mostBytes.toString().padStart(9)} ${p.backwards.toString().padStart(9)} ${p.cpuMs.toFixed(0).padStart(8)}`;
process.stdout.write(
  `forced deltas: ${users} users on ${era}, ${victims} victims, ${rounds} rounds of ${changes} changes, store ${flags.redis ? 'redis' : 'memory'}\n` +
    `${'phase'.padEnd(16)} ${'users/Δ'.padStart(8)} ${'most'.padStart(6)} ${'bytes/Δ'.padStart(10)} ${'most B'.padStart(9)} ${'backwards'.padStart(9)} ${'CPU ms'.padStart(8)}\n` +
    `${row('without attacker', quiet)}\n${row('with attacker', attacked)}\n` +
    `ratio: users ×${(attacked.users / attacked.deltas / (quiet.users / quiet.deltas)).toFixed(2)}, bytes ×${(attacked.bytes / attacked.deltas / (quiet.bytes / quiet.deltas)).toFixed(2)}, CPU ×${(attacked.cpuMs / quiet.cpuMs).toFixed(2)}\n`,
);
await agent.close();
