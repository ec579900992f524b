import { Redis } from 'ioredis';
import { startReplicatedPair } from '../test/support/redis-servers.js';

/**
 * What failover safety costs on Redis (a ledger written before a failover is not vouched for: P5, P6), on a primary and a replica of this machine:
 * - the ledger scripts read the server's run_id (INFO server) on every call, to tell a value
 *   written before a failover or restart: Redis CPU per script call, with and without it
 *   (INFO commandstats, usec_per_call of EVALSHA);
 * - WAIT 1 after a write (not used by the shim): round trip of SET alone and SET + WAIT 1.
 * Prints one JSON line.
 *
 *   node --import tsx bench/redis-failover-cost.ts [calls]
 */

const calls = Number(process.argv[2] ?? 20_000);
const TOKEN = 8;
const HEAD = 48;

const withoutStamp = `
local t = redis.call('GETRANGE', KEYS[1], 0, ${TOKEN - 1})
if t == '' and redis.call('EXISTS', KEYS[1]) == 0 then return false end
if ARGV[1] ~= '' and t == ARGV[1] then return 1 end
return redis.call('GET', KEYS[1])`;

const withStamp = `
local head = redis.call('GETRANGE', KEYS[1], 0, ${HEAD - 1})
if head == '' and redis.call('EXISTS', KEYS[1]) == 0 then return false end
local server = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
if string.sub(head, ${TOKEN + 1}) ~= server then return {0, redis.call('GET', KEYS[1])} end
if ARGV[1] ~= '' and string.sub(head, 1, ${TOKEN}) == ARGV[1] then return 1 end
return redis.call('GET', KEYS[1])`;

async function usecPerCall(redis: Redis, script: string, key: string, token: string): Promise<number> {
  await redis.config('RESETSTAT');
  const sha = (await redis.script('LOAD', script)) as string;
  for (let i = 0; i < calls; i += 100) {
    const p = redis.pipeline();
    for (let j = 0; j < 100; j++) p.evalsha(sha, 1, key, token);
    await p.exec();
  }
  const stats = await redis.info('commandstats');
  return Number(/cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)/.exec(stats)![1]);
}

async function roundTrip(n: number, op: () => Promise<unknown>): Promise<number> {
  const started = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await op();
  return Number(process.hrtime.bigint() - started) / 1000 / n;
}

const pair = await startReplicatedPair();
const redis = new Redis({ port: pair.primary.port });
try {
  const runId = /run_id:(\w+)/.exec(await redis.info('server'))![1]!;
  const token = 'abcdefgh';
  // A value as the store writes it: token, stamp, ~100 KB ledger (10,000 users).
  await redis.set('k', Buffer.concat([Buffer.from(token), Buffer.from(runId), Buffer.alloc(100_000, 1)]));
  const plain = await usecPerCall(redis, withoutStamp, 'k', token);
  const stamped = await usecPerCall(redis, withStamp, 'k', token);
  const rounds = Math.min(calls, 5_000);
  const set = await roundTrip(rounds, () => redis.set('w', 'x'));
  const setWait = await roundTrip(rounds, async () => {
    await redis.set('w', 'x');
    await redis.wait(1, 100);
  });
  console.log(
    JSON.stringify({
      calls,
      readScriptUsecPerCall: { withoutStamp: plain, withStamp: stamped },
      writeRoundTripUsec: { set: Math.round(set), setThenWait1: Math.round(setWait) },
    }),
  );
} finally {
  redis.disconnect();
  await pair.stop();
}
