import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Cluster, Redis } from 'ioredis';
import { beforeAll, describe } from 'vitest';
import { REDIS_REQUIRED } from './redis.js';
import { systemPort } from './ports.js';

/**
 * Redis servers of a test's own (never the shared one on 6379): a Sentinel group (a primary, a
 * replica, three Sentinels) and a three-primary Cluster, on ports the system hands out, in a
 * temp dir, with no persistence. Every process started is killed by `stop()`. Without
 * `redis-server` the tests are skipped loudly, unless REQUIRE_REDIS=1, which makes a missing
 * binary a failure.
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

/** Ports handed to a server of this process: never handed out twice. */
const taken = new Set<number>();

/**
 * A port free a moment ago, as the system picked it. Something else may take it before the
 * server listens: startProcess then starts the server again on another (a collision).
 */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = await systemPort();
    if (taken.has(port)) continue;
    taken.add(port);
    return port;
  }
}

export interface RedisProcess {
  port: number;
  proc: ChildProcess;
  /** Kills the process (SIGKILL by default: a crash, no goodbye to replicas or Sentinels). */
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** Ends a wait at once: waiting longer cannot help (the server exited, or its port is another's). */
class StopWaiting extends Error {}

async function waitUntil<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 15_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (e) {
      if (e instanceof StopWaiting) throw e;
      last = e;
    }
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function cli(port: number, ...args: string[]): Promise<string> {
  // A port held by something that is no Redis may accept and never answer: give up after a while.
  const { stdout } = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], { timeout: 3_000 });
  return stdout;
}

/** The process id of the server answering on `port` (INFO server), if one answers. */
async function serverPid(port: number): Promise<number | undefined> {
  const m = /^process_id:(\d+)/m.exec(await cli(port, 'INFO', 'server'));
  return m ? Number(m[1]) : undefined;
}

/** A server that could not listen on the port it was given (something else took it first). */
class PortTaken extends StopWaiting {}

/** How often a server is started again on fresh ports after its port was taken. */
const PORT_ATTEMPTS = 5;

/**
 * Starts `redis-server` (or a Sentinel with `--sentinel`) with a config file in `dir`, on a
 * port the system hands out (or `port`). `ports(port)` adds lines that depend on the port or
 * need ports of their own (a Cluster node's bus port), made afresh for each attempt. When another process took a port first, the server is started
 * again on fresh ones; the server that answers is checked to be this one (its process id).
 */
async function startProcess(
  dir: string,
  name: string,
  lines: string[],
  o: { sentinel?: boolean; port?: number; ports?: (port: number) => Promise<string[]> } = {},
): Promise<RedisProcess> {
  for (let attempt = 1; ; attempt++) {
    try {
      const port = o.port ?? (await freePort());
      return await startOn(dir, name, port, [...lines, ...((await o.ports?.(port)) ?? [])], o.sentinel ?? false);
    } catch (e) {
      // A port given by the caller is not replaced: the server must come back on it.
      if (!(e instanceof PortTaken) || o.port !== undefined || attempt >= PORT_ATTEMPTS) throw e;
    }
  }
}

async function startOn(dir: string, name: string, port: number, lines: string[], sentinel: boolean): Promise<RedisProcess> {
  const file = join(dir, `${name}.conf`);
  writeFileSync(file, [`port ${port}`, 'bind 127.0.0.1', `dir ${dir}`, ...lines, ''].join('\n'));
  const proc = spawn('redis-server', sentinel ? [file, '--sentinel'] : [file], { stdio: ['ignore', 'pipe', 'pipe'] });
  let exited = false;
  let output = '';
  const keep = (d: Buffer) => {
    output = (output + d.toString()).slice(-4_000);
  };
  proc.stdout!.on('data', keep);
  proc.stderr!.on('data', keep);
  const gone = new Promise<void>((resolve) =>
    proc.once('exit', () => {
      exited = true;
      resolve();
    }),
  );
  try {
    await waitUntil(`${name} on port ${port}`, async () => {
      if (exited) throw new StopWaiting(`${name} exited`);
      const pid = await serverPid(port);
      if (pid === undefined) return undefined;
      // Another server on the port: ours could not listen, or will not.
      if (pid !== proc.pid) throw new PortTaken(`port ${port} answers for another process`);
      return true;
    });
  } catch (e) {
    if (!exited) proc.kill('SIGKILL');
    await gone;
    if (e instanceof PortTaken || /Address already in use/i.test(output)) throw new PortTaken(`${name}: port ${port} taken`, { cause: e });
    throw new Error(`${name} did not start on port ${port}: ${(e as Error).message}\n${output.trim()}`, { cause: e });
  }
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
      r.server = await startProcess(dir, 'aof', lines, { port: r.server.port });
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
        { sentinel: true },
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
        await startProcess(
          dir,
          `node-${i}`,
          [...NO_PERSISTENCE, 'cluster-enabled yes', 'cluster-node-timeout 2000'],
          // The cluster bus on a port of its own (not the port + 10000, which may be past 65535);
          // a node's file per port, so a start again after a collision begins afresh.
          { ports: async (port) => [`cluster-config-file nodes-${port}.conf`, `cluster-port ${await freePort()}`] },
        ),
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
