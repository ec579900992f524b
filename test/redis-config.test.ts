import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config/index.js';
import { redisTargetOf } from '../src/store/create.js';
import { parseRedisNodes } from '../src/config/index.js';
import { describeRedisTarget } from '../src/store/redis-connection.js';

/** The three ways to name the shared Redis: a URL, Sentinels, a Cluster. */

const load = (argv: string[], env: NodeJS.ProcessEnv = {}) => loadConfig(['--upstream', 'http://u.example', ...argv], env).config;

describe('Redis Sentinel and Cluster configuration', () => {
  it('reads Sentinels and their primary name from flags, env and the config file, flags winning', () => {
    const byFlag = load(['--redis-sentinels', 's1:26379,s2:26380,[::1]:26381', '--redis-sentinel-name', 'main']);
    expect(redisTargetOf(byFlag.store)).toEqual({
      kind: 'sentinel',
      name: 'main',
      sentinels: [
        { host: 's1', port: 26379 },
        { host: 's2', port: 26380 },
        { host: '::1', port: 26381 },
      ],
    });
    const byEnv = load([], { REDIS_SENTINELS: 's1,s2', REDIS_SENTINEL_NAME: 'env' });
    expect(redisTargetOf(byEnv.store)).toMatchObject({ name: 'env', sentinels: [{ port: 26379 }, { port: 26379 }] });
    expect(load(['--redis-sentinel-name', 'flag'], { REDIS_SENTINELS: 's1', REDIS_SENTINEL_NAME: 'env' }).store.redisSentinelName).toBe(
      'flag',
    );
  });

  it('reads Cluster nodes', () => {
    expect(redisTargetOf(load(['--redis-cluster', 'a:7000, b:7001']).store)).toEqual({
      kind: 'redis-cluster',
      nodes: [
        { host: 'a', port: 7000 },
        { host: 'b', port: 7001 },
      ],
    });
    expect(redisTargetOf(load([], { REDIS_CLUSTER: 'c' }).store)).toEqual({ kind: 'redis-cluster', nodes: [{ host: 'c', port: 6379 }] });
  });

  it('keeps one Redis by URL, and none without any', () => {
    expect(redisTargetOf(load(['--redis', 'redis://r:6379/2']).store)).toEqual({ kind: 'url', url: 'redis://r:6379/2' });
    expect(redisTargetOf(load([]).store)).toBeUndefined();
  });

  it('refuses conflicting or incomplete settings with one line naming the key', () => {
    const bad: Array<[string[], RegExp]> = [
      [['--redis', 'redis://r', '--redis-cluster', 'a:1'], /^store\.redisCluster \(--redis-cluster\): give one of/],
      [['--redis-sentinels', 'a:1'], /^store\.redisSentinelName .*required with --redis-sentinels/],
      [['--redis-sentinel-name', 'x'], /^store\.redisSentinels .*required with --redis-sentinel-name/],
      [['--redis-cluster', 'a:99999'], /^store\.redisCluster .*host:port/],
      [['--redis-sentinels', ',', '--redis-sentinel-name', 'x'], /^store\.redisSentinels .*no host:port/],
    ];
    for (const [argv, message] of bad) {
      expect(() => load(argv)).toThrow(ConfigError);
      expect(() => load(argv)).toThrow(message);
    }
  });

  it('describes where the store is without any credential (P13)', () => {
    expect(describeRedisTarget({ kind: 'url', url: 'redis://user:secret@r:6380/1' })).toBe('r:6380/1');
    expect(describeRedisTarget({ kind: 'sentinel', name: 'm', sentinels: parseRedisNodes('a:1,b', 26379) })).toBe(
      'sentinel m (a:1,b:26379)',
    );
    expect(describeRedisTarget({ kind: 'redis-cluster', nodes: parseRedisNodes('a:1', 6379) })).toBe('cluster (a:1)');
  });
});
