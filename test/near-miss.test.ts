import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, editDistance, envNearMiss, envNearMisses, knownEnvNames, loadConfig, REMOVED_SETTINGS } from '../src/config/index.js';

/** Start-up warnings for a setting the shim would silently not read: a misspelt variable or flag. */

describe('envNearMiss: a variable that is one edit from a setting names it', () => {
  it.each([
    ['PROT', 'PORT'],
    ['PORTT', 'PORT'],
    ['port', 'PORT'],
    ['HOTS', 'HOST'],
    ['LOGLEVEL', 'LOG_LEVEL'],
    ['LOG_LEVLE', 'LOG_LEVEL'],
    ['log_level', 'LOG_LEVEL'],
    ['LOG-LEVEL', 'LOG_LEVEL'],
    ['REDIS', 'REDIS_URL'],
    ['REDISURL', 'REDIS_URL'],
    ['REDIS_URI', 'REDIS_URL'],
    ['UPSTREAM', 'UPSTREAM_URL'],
    ['UPSTREAM_URI', 'UPSTREAM_URL'],
    ['UPSTREAMURL', 'UPSTREAM_URL'],
    ['UPSTREAM_TIMEOUT', 'UPSTREAM_TIMEOUT_MS'],
    ['SHUTDOWN_GRACE', 'SHUTDOWN_GRACE_MS'],
    ['RECORD', 'RECORD_HAR'],
    ['REPLAY', 'REPLAY_HAR'],
    ['REDIS_SENTINEL', 'REDIS_SENTINELS'],
    ['REALM_HOST', 'REALM_HOSTS'],
    ['TRUSTPROXY', 'TRUST_PROXY'],
    ['ACCESSLOG', 'ACCESS_LOG'],
  ])('%s → %s', (name, meant) => {
    expect(envNearMiss(name)).toBe(meant);
  });

  it.each(knownEnvNames())('%s is a setting: no warning', (name) => {
    expect(envNearMiss(name)).toBeUndefined();
  });

  it.each([
    // The system's, the shell's and the tools' own.
    'PATH',
    'HOME',
    'HOSTNAME',
    'HOSTTYPE',
    'PWD',
    'OLDPWD',
    'TERM',
    'USER',
    'LOGNAME',
    'SHELL',
    'SHLVL',
    'LANG',
    'LANGUAGE',
    'TZ',
    'TMPDIR',
    'EDITOR',
    'DISPLAY',
    'COLUMNS',
    '_',
    'NODE_ENV',
    'NODE_OPTIONS',
    'NODE_EXTRA_CA_CERTS',
    'npm_config_cache',
    'npm_lifecycle_event',
    'LC_ALL',
    'XDG_RUNTIME_DIR',
    'SSH_AUTH_SOCK',
    // Unrelated names that share a word with a setting.
    'REDIS_PASSWORD',
    'REDIS_HOST',
    'REDIS_PORT',
    'UPSTREAM_HOST',
    'DOCKER_HOST',
    'KUBERNETES_PORT',
    'KUBERNETES_SERVICE_HOST',
    'HTTP_PROXY',
    'HTTPS_PROXY',
    'NO_PROXY',
    'DEBUG',
    'CI',
    'WORKDIR',
    'LOG_FORMAT',
    'TRUST_PROXIES_FROM',
  ])('%s: no warning', (name) => {
    expect(envNearMiss(name)).toBeUndefined();
  });

  it('envNearMisses: each near miss of an environment once, set and not empty', () => {
    expect(envNearMisses({ PROT: '1234', PORT: '9991', PATH: '/bin', LOGLEVEL: '', REDIS: 'redis://x', HOME: '/root' })).toEqual([
      { name: 'PROT', meant: 'PORT' },
      { name: 'REDIS', meant: 'REDIS_URL' },
    ]);
  });
});

describe('editDistance', () => {
  it.each([
    ['port', 'port', 0],
    ['prot', 'port', 1],
    ['port', 'ports', 1],
    ['host', 'home', 2],
    ['', 'abc', 3],
    ['ab', 'ba', 1],
    ['loglevle', 'loglevel', 1],
  ])('%s ↔ %s: %i', (a, b, d) => {
    expect(editDistance(a, b)).toBe(d);
    expect(editDistance(b, a)).toBe(d);
  });
});

describe('a removed setting: one line saying what to do instead, however it is given', () => {
  const failure = (argv: string[], env: NodeJS.ProcessEnv = {}) => {
    try {
      loadConfig(argv, env);
    } catch (e) {
      expect(e).toBeInstanceOf(ConfigError);
      return (e as Error).message;
    }
    throw new Error('no error');
  };
  const workers = REMOVED_SETTINGS.find((r) => r.flag === 'workers')!;

  it('server.workers names the deployment guide and the replicas that replace it', () => {
    expect(workers.instead).toMatch(/several replicas/);
    expect(workers.instead).toContain('docs/deployment.md, "Several replicas on one host"');
  });

  it.each([
    [['--demo', '--workers', '2'], {}, '--workers'],
    [['--demo', '--workers=auto'], {}, '--workers'],
    [['--demo'], { WORKERS: '4' }, 'WORKERS'],
    // The flag is named before the variable, each as given.
    [['--demo', '--workers', '1'], { WORKERS: '1' }, '--workers'],
  ])('%j, environment %j: blamed on %s', (argv, env, source) => {
    expect(failure(argv, env)).toBe(`server.workers (${source}): removed: ${workers.instead}`);
  });

  it('an empty WORKERS is no setting given', () => {
    expect(loadConfig(['--demo'], { WORKERS: '' }).config.replay.demo).toBe(true);
  });

  it("a config file's server.workers is blamed on the file, before a misspelt key beside it", () => {
    const dir = mkdtempSync(join(tmpdir(), 'zcs-removed-'));
    const file = join(dir, 'shim.json');
    writeFileSync(file, JSON.stringify({ server: { prot: 1, workers: 2 } }));
    expect(failure(['--config', file, '--demo'])).toBe(`server.workers (config file ${file}): removed: ${workers.instead}`);
  });

  it('--workers is not taken for a misspelling of another flag, nor WORKERS for a near miss', () => {
    expect(failure(['--demo', '--worker', '2'])).toBe('--worker: unknown option');
    expect(envNearMiss('WORKERS')).toBeUndefined();
    expect(knownEnvNames()).not.toContain('WORKERS');
  });
});

describe('an unknown flag', () => {
  const failure = (argv: string[]) => {
    try {
      loadConfig(argv, {});
    } catch (e) {
      expect(e).toBeInstanceOf(ConfigError);
      return (e as Error).message;
    }
    throw new Error('no error');
  };

  it.each([
    [['--demo', '--prot', '1234'], '--prot: unknown option (did you mean --port?)'],
    [['--demo', '--prot=1234'], '--prot: unknown option (did you mean --port?)'],
    [['--demo', '--log-levle', 'debug'], '--log-levle: unknown option (did you mean --log-level?)'],
    [['--demo', '--redis-url', 'redis://x'], '--redis-url: unknown option (did you mean --redis?)'],
    [['--demo', '--upstream-timeout', '5'], '--upstream-timeout: unknown option (did you mean --upstream-timeout-ms?)'],
    [['--demo', '--presence-coalesce-ms', '5'], '--presence-coalesce-ms: unknown option (did you mean --coalesce-ms?)'],
    [['--upstreams', 'http://x'], '--upstreams: unknown option (did you mean --upstream?)'],
    [['--demo', '--chekc'], '--chekc: unknown option (did you mean --check?)'],
    [['--demo', '--config-file', 'x.json'], '--config-file: unknown option (did you mean --config?)'],
    [['--demo', '--frobnicate'], '--frobnicate: unknown option'],
    [['--demo', '-x'], '-x: unknown option'],
  ])('%j: %s', (argv, line) => {
    expect(failure(argv)).toBe(line);
  });
});
