import type { Config } from './config/index.js';
import type { Logger } from './observability/logger.js';
import { openUpstream, type UpstreamTarget } from './open-upstream.js';
import { createShim, type Shim } from './server.js';

/**
 * A shim composed as the configuration asks: its upstream opened (the upstream, a recorder or a
 * replay, open-upstream.ts), then the server in front of it. The one way both the CLI and the
 * embedding API (src/index.ts) start a shim.
 */

export interface OpenShimOptions {
  config: Config;
  log: Logger;
  /** Where each key's value came from, for the words of a ConfigError. */
  sources?: ReadonlyMap<string, string>;
  /** A replay calls this for each request it has no recorded answer for. */
  onMiss?: (what: string) => void;
}

export interface OpenedShim {
  shim: Shim;
  upstream: UpstreamTarget;
  /** Drains the shim (shim.close), then closes what stands in for the upstream. Once. */
  close(): Promise<void>;
}

/** Throws ConfigError when the upstream cannot be opened (a HAR file unreadable, a recording unwritable). */
export async function openShim(o: OpenShimOptions): Promise<OpenedShim> {
  const { config, log } = o;
  const upstream = await openUpstream(config, log, o.sources ?? new Map(), o.onMiss ? { onMiss: o.onMiss } : {});
  const shim = createShim({
    config,
    log,
    target: upstream.target,
    upstreamId: upstream.upstreamId,
    retryUpstream: !upstream.standIn,
  });
  let closing: Promise<void> | undefined;
  return { shim, upstream, close: () => (closing ??= shim.close().then(() => upstream.close())) };
}
