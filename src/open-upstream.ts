import { existsSync, renameSync, statSync } from 'node:fs';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { ConfigError, namedKey, reachableHost, type Config } from './config/index.js';
import { startRecorder } from './har/recorder.js';
import { HAR_FLUSH_MS } from './har/writer.js';
import { startReplay } from './har/replay.js';
import type { Logger } from './observability/logger.js';
import { PROJECT_ROOT } from './version.js';

/**
 * What the shim sends upstream traffic to, as the configuration asks: the upstream itself, a
 * recorder in front of it (`record.har`), or a replay of a HAR file (`replay.har`, `replay.demo`).
 * Shared by the CLI and the embedding API (src/index.ts), so both start a shim the same way.
 */

/** The bundled recording of a Zulip 2.1 server that `--demo` (and so `npm start`) replays. */
export const DEMO_HAR = resolve(PROJECT_ROOT, 'examples', 'demo-zulip-2.1.har');

export interface UpstreamTarget {
  /** Where the shim sends upstream traffic. */
  target: string;
  /** The upstream's identity in realm keys. */
  upstreamId: string;
  describe: string;
  close(): Promise<void>;
  /** H2 strict mode: the requests replay could not answer, reported at shutdown. */
  strictMisses(): string[];
  /** Every request a replay could not answer so far (strict or not); empty when not replaying. */
  misses(): string[];
  /** Plain words for stdout once listening (the demo says how to try it). */
  announce?(url: string): string;
  /** X5: the target stands in for the upstream (recorder, replay) and is not sent a request twice. */
  standIn?: boolean;
}

export interface OpenUpstreamOptions {
  /** A replay calls this for each request it has no recorded answer for, as it happens. */
  onMiss?: (what: string) => void;
}

/** The upstream itself, with nothing standing in for it. */
export function directUpstream(url: string): UpstreamTarget {
  return { target: url, upstreamId: url, describe: url, close: async () => {}, strictMisses: () => [], misses: () => [] };
}

/**
 * Recording and replay stand in for the upstream on loopback (H1, H2), so the shim has one
 * code path: `target` is the recorder or the replayer, `upstreamId` the upstream they stand for.
 * Throws ConfigError naming the key (and where its value came from, by `sources`).
 */
export async function openUpstream(
  config: Config,
  log: Logger,
  sources: ReadonlyMap<string, string>,
  o: OpenUpstreamOptions = {},
): Promise<UpstreamTarget> {
  const recordKey = namedKey('record.har', sources, '--record');
  const replayKey = namedKey('replay.har', sources, '--replay');
  const record = config.record.har;
  if (record && !config.upstream.url) {
    const with_ = config.replay.har ? ', not with --replay' : '';
    throw new ConfigError(`${recordKey}: recording needs --upstream URL${with_}`);
  }
  if (config.upstream.url) {
    const url = config.upstream.url;
    if (!record) return directUpstream(url);
    const file = resolve(record);
    const aside = setAsideRecording(file, recordKey);
    if (aside) log.warn({ file, movedTo: aside }, 'record.har: the existing recording was moved aside, not overwritten');
    const recorder = await startRecorder({
      upstream: url,
      file,
      log,
      insecureTls: config.upstream.insecureTls,
      flushMs: HAR_FLUSH_MS,
    }).catch((e: unknown) => {
      throw new ConfigError(`${recordKey}: cannot write ${file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
    });
    // The recorder retries against the upstream itself (X5): a retry here too could send one GET four times.
    return { ...directUpstream(url), target: recorder.url, close: () => recorder.close(), standIn: true };
  }

  const demo = config.replay.demo;
  if (!demo && !config.replay.har) {
    throw new ConfigError('no upstream: give upstream.url for a Zulip server, replay.har for a recording, or replay.demo');
  }
  const file = resolve(demo ? DEMO_HAR : config.replay.har!);
  const replay = await startReplay({ file, strict: config.replay.strict, log, ...(o.onMiss ? { onMiss: o.onMiss } : {}) }).catch(
    (e: unknown) => {
      throw new ConfigError(`${replayKey}: ${(e as Error).message}`);
    },
  );
  return {
    target: replay.url,
    upstreamId: `replay:${file}`,
    describe: `replay:${file}`,
    close: () => replay.close(),
    strictMisses: () => (config.replay.strict ? replay.misses() : []),
    misses: () => replay.misses(),
    // Replay answers identical requests in recorded order: a retry would take the next answer.
    standIn: true,
    ...(demo ? { announce: demoAnnouncement } : {}),
  };
}

/**
 * `--record` never destroys a recording: an existing non-empty file is renamed to
 * `NAME.<UTC time>.har` (a free name) before recording starts. Returns the new name, if any.
 */
function setAsideRecording(file: string, key: string): string | undefined {
  let size: number;
  try {
    size = statSync(file).size;
  } catch {
    return undefined; // nothing there (or nothing readable: opening it reports that)
  }
  if (size === 0) return undefined;
  const ext = extname(file);
  const stem = join(dirname(file), basename(file, ext));
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  for (let n = 0; ; n++) {
    const aside = `${stem}.${stamp}${n ? `-${n}` : ''}${ext}`;
    if (existsSync(aside)) continue;
    try {
      renameSync(file, aside);
    } catch (e) {
      throw new ConfigError(
        `${key}: ${file} exists and cannot be moved aside (${(e as NodeJS.ErrnoException).code ?? 'error'}); choose another file`,
      );
    }
    return aside;
  }
}

function demoAnnouncement(listening: string): string {
  // A shim bound to every interface (a container's HOST=0.0.0.0) is tried on the loopback.
  const at = new URL(listening);
  at.hostname = reachableHost(at.hostname.replace(/^\[(.*)\]$/, '$1'));
  if (at.hostname.includes(':') && !at.hostname.startsWith('[')) at.hostname = `[${at.hostname}]`;
  const url = at.origin;
  const poll = (id: string) =>
    `curl -s -u demo@example.com:any-key -d status=active -d last_update_id=${id} ${url}/api/v1/users/me/presence`;
  return [
    '',
    `zulip-compat-shim is listening on ${listening}, in front of a recorded Zulip 2.1 server (the bundled demo).`,
    'A Zulip 2.1 server has no incremental presence; through the shim it has. Try a full modern poll:',
    '',
    `  ${poll('-1')}`,
    '',
    'then poll again with the presence_last_update_id of the answer (wait 5 seconds between polls to',
    'get the next recorded change; closer polls are answered from the shared snapshot):',
    '',
    `  ${poll('<presence_last_update_id>')}`,
    '',
    'Stop with Ctrl-C.',
    '',
  ].join('\n');
}
