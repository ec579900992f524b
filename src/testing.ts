import { createShim, type Shim, type ShimOptions } from './index.js';

/**
 * `import { startReplay } from 'zulip-compat-shim/testing'`: a shim on a free loopback port in
 * front of a recorded HAR (by default the bundled Zulip 2.1 demo), for a test suite (vitest,
 * jest, mocha) to send its client's requests to. A request the recording has no answer for is
 * reported to the test: it gets a 502 REPLAY_MISS, and close() rejects with a ReplayMissError
 * listing every such request (unless `failOnMiss: false`).
 */

export interface StartReplayOptions extends Omit<ShimOptions, 'upstream' | 'replay' | 'record'> {
  /** The HAR file to replay (relative to the working directory); absent: the bundled demo recording. */
  har?: string;
  /** close() rejects with a ReplayMissError when there was a miss. @default true */
  failOnMiss?: boolean;
  /** Told of each miss as it happens. */
  onMiss?: (request: string) => void;
}

export interface RunningReplay {
  /** `http://127.0.0.1:PORT`: the base URL for the client under test (its Zulip server URL). */
  url: string;
  port: number;
  shim: Shim;
  /** The requests the recording had no answer for so far, in order. */
  misses(): string[];
  /**
   * Stops the shim and the replay at once: requests still open (a long poll) are ended, not
   * waited for (`server: { shutdownGraceMs }` to drain them instead). Rejects with a
   * ReplayMissError after a miss (see failOnMiss).
   */
  close(): Promise<void>;
}

/** A test's requests that the recording had no answer for. */
export class ReplayMissError extends Error {
  override name = 'ReplayMissError';
  constructor(readonly misses: string[]) {
    super(`zulip-compat-shim replay: ${misses.length} request(s) had no recorded answer:\n${misses.map((m) => `  ${m}`).join('\n')}`);
  }
}

export async function startReplay(options: StartReplayOptions = {}): Promise<RunningReplay> {
  const { har, failOnMiss = true, onMiss, ...rest } = options;
  const shim = await createShim({
    ...rest,
    replay: har ? { har, strict: true } : { demo: true, strict: true },
    // Quiet by default: a test's output is the test runner's; the misses are reported anyway.
    log: { level: 'silent', ...rest.log },
    // Closes at once: a test's open long poll is ended (503), not waited for, so close() in an
    // afterAll hook returns well within the runner's hook timeout.
    server: { port: 0, host: '127.0.0.1', shutdownGraceMs: 0, ...rest.server },
    ...(onMiss ? { onReplayMiss: onMiss } : {}),
  });
  let address: { url: string; port: number };
  try {
    address = await shim.listen();
  } catch (e) {
    await shim.close();
    throw e;
  }
  let closing: Promise<void> | undefined;
  return {
    url: address.url,
    port: address.port,
    shim,
    misses: () => shim.replayMisses(),
    close: () =>
      (closing ??= shim.close().then(() => {
        const misses = shim.replayMisses();
        if (failOnMiss && misses.length > 0) throw new ReplayMissError(misses);
      })),
  };
}
