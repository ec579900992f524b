#!/usr/bin/env node
import { resolve } from 'node:path';
import { ConfigError, loadConfig, PROJECT_ROOT, USAGE, type Config } from './config.js';
import { createLogger, type Logger } from './observability/logger.js';
import { logStartup } from './observability/startup.js';
import { createShim } from './server.js';
import { realmOf } from './upstream/realm.js';
import { VERSION } from './version.js';

/** The bundled recording of a Zulip 2.1 server that `npm start` replays with no arguments. */
export const DEMO_HAR = resolve(PROJECT_ROOT, 'examples', 'demo-zulip-2.1.har');

interface UpstreamTarget {
  /** Where the shim sends upstream traffic. */
  target: string;
  /** The upstream's identity in realm keys. */
  upstreamId: string;
  describe: string;
  close(): Promise<void>;
}

async function openUpstream(config: Config, log: Logger): Promise<UpstreamTarget> {
  if (config.upstream.url) {
    return { target: config.upstream.url, upstreamId: config.upstream.url, describe: config.upstream.url, close: async () => {} };
  }
  const file = config.replay.har ?? DEMO_HAR;
  throw new ConfigError(`replay.har: replaying ${file} is not available in this build; give --upstream URL`);
  void log;
}

async function main(argv: string[]): Promise<number> {
  let loaded;
  try {
    loaded = loadConfig(argv);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`zulip-compat-shim: invalid configuration: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  if (loaded.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  if (loaded.version) {
    process.stdout.write(`${VERSION}\n`);
    return 0;
  }
  const { config } = loaded;
  const log = createLogger(config.log.level);
  let upstream: UpstreamTarget;
  try {
    upstream = await openUpstream(config, log);
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`zulip-compat-shim: invalid configuration: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  if (config.upstream.insecureTls) log.warn('upstream TLS certificates are NOT verified (--insecure-upstream-tls)');

  const shim = createShim({ config, log, target: upstream.target, upstreamId: upstream.upstreamId });
  const { url } = await shim.listen();
  // Not awaited: the line waits briefly for the upstream's feature level while serving goes on.
  void logStartup(log, { version: VERSION, upstream: upstream.describe, store: shim.context.store.kind, listen: url }, () =>
    shim.context.featureLevels.featureLevel(realmOf(upstream.upstreamId, {})),
  );

  return new Promise<number>((done) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) return;
      stopping = true;
      log.info({ signal }, 'shutting down');
      void shim
        .close()
        .then(() => upstream.close())
        .then(() => done(0), (e) => {
          log.error({ err: e }, 'error during shutdown');
          done(1);
        });
    };
    process.on('SIGTERM', () => stop('SIGTERM'));
    process.on('SIGINT', () => stop('SIGINT'));
  });
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`zulip-compat-shim: ${(e as Error).stack ?? String(e)}\n`);
    process.exit(1);
  },
);
