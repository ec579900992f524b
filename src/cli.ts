#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { ConfigError, infoRequest, loadConfig, oneLine, parseListenAddress, reachableHost, usage, type Config } from './config/index.js';
import { HeldSignals } from './signals.js';
import { VERSION } from './version.js';

/**
 * The command line. Serving and `--check` load the shim itself (serve.ts); `--healthcheck`,
 * `--version` and `--help` need only the configuration, so they run in under half the CPU time
 * and with two thirds of the memory.
 */

function configFailure(e: ConfigError): number {
  process.stderr.write(`zulip-compat-shim: invalid configuration: ${oneLine(e.message)}\n`);
  return 2;
}

/**
 * The flags the running shim was started with, when it is this container's main process (the
 * image's HEALTHCHECK runs beside it and sees the same environment, but not its flags).
 */
function runningShimArgs(): string[] | undefined {
  try {
    const argv = readFileSync('/proc/1/cmdline', 'utf8').split('\0').filter(Boolean);
    const at = argv.findIndex((a) => /(^|\/)cli\.[jt]s$/.test(a));
    return at < 0 ? undefined : argv.slice(at + 1);
  } catch {
    return undefined;
  }
}

/**
 * `--healthcheck`: asks GET /healthz of the shim this configuration describes (same flags,
 * environment and config file) and exits 0 when it answers 200, 1 otherwise: on the admin
 * listener with --admin-listen, else on the public one. A listener on every interface is asked
 * on loopback.
 */
async function healthcheck(argv: string[]): Promise<number> {
  const args = argv.filter((a) => a !== '--healthcheck');
  let config: Config;
  try {
    ({ config } = loadConfig(args.length ? args : (runningShimArgs() ?? []), process.env, { needsUpstream: false }));
  } catch (e) {
    process.stderr.write(`zulip-compat-shim: healthcheck: ${oneLine((e as Error).message)}\n`);
    return 1;
  }
  // With --admin-listen, /healthz is answered there only.
  const at = config.server.adminListen ? parseListenAddress(config.server.adminListen) : config.server;
  const { port } = at;
  const host = reachableHost(at.host);
  return new Promise<number>((done) => {
    const req = http.get({ host, port, path: '/healthz', timeout: 4_000 }, (res) => {
      res.resume();
      done(res.statusCode === 200 ? 0 : 1);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (e) => {
      process.stderr.write(`zulip-compat-shim: healthcheck: http://${host}:${port}/healthz: ${e.message}\n`);
      done(1);
    });
  });
}

async function main(argv: string[]): Promise<number> {
  if (argv.includes('--healthcheck')) return healthcheck(argv);
  const checking = argv.some((a) => a === '--check' || a.startsWith('--check='));
  const info = checking ? undefined : infoRequest(argv);
  if (info === 'help') {
    process.stdout.write(usage());
    return 0;
  }
  if (info === 'version') {
    process.stdout.write(`${VERSION}\n`);
    return 0;
  }
  // X9: a serving shim's signals are held from here, before its code has loaded.
  const signals = checking ? undefined : new HeldSignals();
  try {
    const { check, serve } = await import('./serve.js');
    return await (checking ? check(argv) : serve(argv, signals));
  } catch (e) {
    if (e instanceof ConfigError) return configFailure(e);
    throw e;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`zulip-compat-shim: ${(e as Error).stack ?? String(e)}\n`);
    process.exit(1);
  },
);
