import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Cluster, Redis } from 'ioredis';
import { beforeAll, describe } from 'vitest';
import { REDIS_REQUIRED } from './redis.js';

/**
 * Redis servers of a test's own (never the shared one on 6379): a Sentinel group (a primary, a
 * replica, three Sentinels) and a three-primary Cluster, on free ports, in a temp dir, with no
 * persistence. Every process started is killed by `stop()`. Without `redis-server` the tests
 * are skipped loudly, unless REQUIRE_REDIS=1, which makes a missing binary a failure.
 */

const run = promisify(execFile);

function has(binary: string): boolean {
  return spawnSync(binary, ['--version'], { stdio: 'ignore' }).status === 0;
}

export const redisServerAvailable = has('redis-server') && has('redis-cli');

/** A describe() for tests that start their own Redis servers. */
export function describeRedisServers(name: string, fn: () => void): void {
  const skip = !redisServerAvailable && !REDIS_REQUIRED;
  if (skip) {
    console.warn(
      `\n!!! SKIPPING "${name}": redis-server / redis-cli not installed. ` +
        'Install Redis 7 to run these tests; REQUIRE_REDIS=1 turns this into a failure. !!!\n',
    );
  }
  describe.skipIf(skip)(name, () => {
    if (!redisServerAvailable) {
      beforeAll(() => {
        throw new Error('REQUIRE_REDIS=1 but redis-server / redis-cli are not installed');
      });
    }
    fn();
  });
}

function listenable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

const taken = new Set<number>();

/** A free port whose cluster bus port (+10000) is free too. */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 30_000);
    if (taken.has(port)) continue;
    if ((await listenable(port)) && (await listenable(port + 10_000))) {
      taken.add(port);
      return port;
    }
  }
}

export interface RedisProcess {
  port: number;
  proc: ChildProcess;
  /** Kills the process (SIGKILL by default: a crash, no goodbye to replicas or Sentinels). */
  kill(signal?: NodeJS.Signals): Promise<void>;
}

async function waitUntil<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 15_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args]);
  return stdout;
}

/** Starts `redis-server` (or a Sentinel with `--sentinel`) with a config file in `dir`. */
async function startProcess(dir: string, name: string, lines: string[], sentinel = false, port?: number): Promise<RedisProcess> {
  port ??= await freePort();
  const file = join(dir, `${name}.conf`);
  writeFileSync(file, [`port ${port}`, 'bind 127.0.0.1', `dir ${dir}`, ...lines, ''].join('\n'));
  const proc = spawn('redis-server', sentinel ? [file, '--sentinel'] : [file], { stdio: ['ignore', 'ignore', 'pipe'] });
  let exited = false;
  proc.once('exit', () => (exited = true));
  await waitUntil(`${name} on port ${port}`, async () => {
    if (exited) throw new Error(`${name} exited`);
    return (await cli(port, 'PING')).trim() === 'PONG' ? true : undefined;
  });
  return {
    port,
    proc,
    kill: (signal: NodeJS.Signals = 'SIGKILL') =>
      new Promise<void>((resolve) => {
        if (exited) return resolve();
        proc.once('exit', () => resolve());
        proc.kill(signal);
      }),
  };
}

const NO_PERSISTENCE = ['save ""', 'appendonly no'];
const REPLICATION = ['repl-diskless-sync yes', 'repl-diskless-sync-delay 0', 'repl-ping-replica-period 1'];

/** A primary and its replica, in sync. */
async function startPair(dir: string, started: RedisProcess[]): Promise<{ primary: RedisProcess; replica: RedisProcess }> {
  const primary = await startProcess(dir, 'primary', [...NO_PERSISTENCE, ...REPLICATION]);
  started.push(primary);
  const replica = await startProcess(dir, 'replica', [...NO_PERSISTENCE, ...REPLICATION, `replicaof 127.0.0.1 ${primary.port}`]);
  started.push(replica);
  await waitUntil('the replica in sync', async () =>
    (await cli(replica.port, 'INFO', 'replication')).includes('master_link_status:up') ? true : undefined,
  );
  return { primary, replica };
}

export interface PersistentRedis {
  server: RedisProcess;
  /** Stops the server (SIGTERM: it writes its append-only file) and starts it again on the same port and files. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** One server with an append-only file, to be restarted from it. */
export async function startPersistentRedis(): Promise<PersistentRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'zcs-aof-'));
  const lines = ['save ""', 'appendonly yes', 'appendfsync always'];
  const r: PersistentRedis = {
    server: await startProcess(dir, 'aof', lines),
    async restart() {
      await r.server.kill('SIGTERM');
      r.server = await startProcess(dir, 'aof', lines, false, r.server.port);
    },
    async stop() {
      await r.server.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return r;
}

export interface ReplicatedPair {
  primary: RedisProcess;
  replica: RedisProcess;
  stop(): Promise<void>;
}

/** A primary and a replica in sync, without Sentinels: the test promotes the replica itself. */
export async function startReplicatedPair(): Promise<ReplicatedPair> {
  const dir = mkdtempSync(join(tmpdir(), 'zcs-pair-'));
  const started: RedisProcess[] = [];
  const stop = async () => {
    await Promise.all(started.map((p) => p.kill()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    return { ...(await startPair(dir, started)), stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

export interface SentinelGroup {
  name: string;
  primary: RedisProcess;
  replica: RedisProcess;
  sentinels: RedisProcess[];
  /** `host:port,host:port,host:port` of the Sentinels, as `--redis-sentinels` takes it. */
  sentinelList: string;
  /** The port the Sentinels name as primary now. */
  primaryPort(): Promise<number>;
  stop(): Promise<void>;
}

/**
 * A primary, its replica and three Sentinels (quorum 2) that fail over quickly: the primary is
 * down after `downAfterMs` without an answer. Resolves once every Sentinel knows the replica
 * and the other Sentinels, so a failover can start at once.
 */
export async function startSentinelGroup(o: { downAfterMs?: number; failoverTimeoutMs?: number } = {}): Promise<SentinelGroup> {
  const dir = mkdtempSync(join(tmpdir(), 'zcs-sentinel-'));
  const name = 'zcs-primary';
  const started: RedisProcess[] = [];
  try {
    const { primary, replica } = await startPair(dir, started);
    const sentinels: RedisProcess[] = [];
    for (let i = 0; i < 3; i++) {
      const s = await startProcess(
        dir,
        `sentinel-${i}`,
        [
          `sentinel monitor ${name} 127.0.0.1 ${primary.port} 2`,
          `sentinel down-after-milliseconds ${name} ${o.downAfterMs ?? 400}`,
          `sentinel failover-timeout ${name} ${o.failoverTimeoutMs ?? 2_000}`,
          `sentinel parallel-syncs ${name} 1`,
        ],
        true,
      );
      sentinels.push(s);
      started.push(s);
    }
    // Sentinels find the replica through the primary's INFO and each other through hello messages.
    for (const s of sentinels) {
      await waitUntil('Sentinels that know each other and the replica', async () => {
        const replicas = await cli(s.port, 'SENTINEL', 'REPLICAS', name);
        const peers = await cli(s.port, 'SENTINEL', 'SENTINELS', name);
        const peerCount = peers.split('\n').filter((l) => l.trim() === 'runid').length;
        return replicas.includes(String(replica.port)) && peerCount >= 2 ? true : undefined;
      });
    }
    return {
      name,
      primary,
      replica,
      sentinels,
      sentinelList: sentinels.map((s) => `127.0.0.1:${s.port}`).join(','),
      async primaryPort() {
        const out = (await cli(sentinels[0]!.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)).trim().split('\n');
        return Number(out[1]);
      },
      async stop() {
        await Promise.all(started.map((p) => p.kill()));
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (e) {
    await Promise.all(started.map((p) => p.kill()));
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}

export interface RedisClusterProcesses {
  nodes: RedisProcess[];
  /** `host:port,…` of the nodes, as `--redis-cluster` takes it. */
  nodeList: string;
  /** A plain Cluster client for checks and clean-up (not the one under test). */
  admin(): Cluster;
  stop(): Promise<void>;
}

/** Three primaries, no replicas, every slot assigned; resolves when the cluster state is ok. */
export async function startRedisCluster(): Promise<RedisClusterProcesses> {
  const dir = mkdtempSync(join(tmpdir(), 'zcs-cluster-'));
  const nodes: RedisProcess[] = [];
  try {
    for (let i = 0; i < 3; i++) {
      nodes.push(
        await startProcess(dir, `node-${i}`, [
          ...NO_PERSISTENCE,
          'cluster-enabled yes',
          `cluster-config-file nodes-${i}.conf`,
          'cluster-node-timeout 2000',
        ]),
      );
    }
    const addresses = nodes.map((n) => `127.0.0.1:${n.port}`);
    await run('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes']);
    for (const n of nodes) {
      await waitUntil('cluster_state:ok', async () =>
        (await cli(n.port, 'CLUSTER', 'INFO')).includes('cluster_state:ok') ? true : undefined,
      );
    }
    return {
      nodes,
      nodeList: addresses.join(','),
      admin() {
        const c = new Cluster(
          nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
          { redisOptions: { maxRetriesPerRequest: 1 } },
        );
        c.on('error', () => {});
        return c;
      },
      async stop() {
        await Promise.all(nodes.map((p) => p.kill()));
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (e) {
    await Promise.all(nodes.map((p) => p.kill()));
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}

/** Every key under the prefix on every primary of a Cluster (SCAN is per node). */
export async function clusterKeysUnder(cluster: Cluster, prefix: string): Promise<string[]> {
  const pattern = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`;
  const keys: string[] = [];
  for (const node of cluster.nodes('master')) {
    let cursor = '0';
    do {
      const [next, batch] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      keys.push(...batch);
      cursor = next;
    } while (cursor !== '0');
  }
  return keys;
}

/** Deletes every key under the prefix, one key at a time (keys of a Cluster are in many slots). */
export async function clusterDeleteKeysUnder(cluster: Cluster, prefix: string): Promise<number> {
  const keys = await clusterKeysUnder(cluster, prefix);
  await Promise.all(keys.map((k) => cluster.unlink(k)));
  return keys.length;
}

/** A plain connection to one server of a test's own. */
export function redisAt(port: number): Redis {
  const r = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1 });
  r.on('error', () => {});
  return r;
}
