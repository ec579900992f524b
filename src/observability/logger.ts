import { pino, type Logger, type DestinationStream } from 'pino';

/**
 * P13: credentials never reach a log line. Header names arrive lower-cased from Node; the
 * upstream's response headers are logged through the same lower-cased objects.
 */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-csrftoken"]',
  'req.headers["proxy-authorization"]',
  'res.headers["set-cookie"]',
  'headers.authorization',
  'headers.cookie',
  'headers["set-cookie"]',
  '*.api_key',
  '*.password',
];

export type { Logger };

/** How long a log line may wait in the stdout buffer. */
const FLUSH_EVERY_MS = 200;
/** The lines are copied into chunks of this size, each handed to the writer whole. */
const CHUNK_BYTES = 16 * 1024;

/**
 * stdout through a buffer, written out every FLUSH_EVERY_MS (and by pino on exit): a request log
 * line written synchronously cost the pass-through ~40% of its throughput (bench B4).
 *
 * Each line is encoded straight into the current 16 KB chunk, and sonic-boom (pino.destination,
 * in its buffer mode) is handed whole chunks, which it writes out in order, without blocking.
 * A Buffer made for each line, as sonic-boom's own batching needs, cost a passed-through request
 * about 2 µs of the main thread's CPU (a tenth of its throughput, B4): a small Buffer a line,
 * the 8 KB pool slabs they are cut from, and the batch's concatenation. (In its string mode
 * sonic-boom measures the whole pending batch with Buffer.byteLength on every write.)
 */
function bufferedStdout(): DestinationStream {
  const boom = pino.destination({ dest: 1, sync: false, minLength: 0, contentMode: 'buffer' });
  let chunk = Buffer.allocUnsafeSlow(CHUNK_BYTES);
  let used = 0;
  const handOver = () => {
    if (used === 0) return;
    boom.write(chunk.subarray(0, used) as unknown as string);
    chunk = Buffer.allocUnsafeSlow(CHUNK_BYTES);
    used = 0;
  };
  let atExit = false;
  const write = (line: string) => {
    if (!atExit) {
      atExit = true;
      beforeExit.push(handOver);
    }
    // UTF-8 takes at most three bytes for each UTF-16 unit.
    if (used + line.length * 3 > CHUNK_BYTES) {
      handOver();
      if (line.length * 3 > CHUNK_BYTES) {
        boom.write(Buffer.from(line) as unknown as string);
        return;
      }
    }
    used += chunk.write(line, used);
  };
  setInterval(() => {
    handOver();
    boom.flush();
  }, FLUSH_EVERY_MS).unref();
  return {
    write,
    flush: (cb?: (err?: Error) => void) => {
      handOver();
      boom.flush(cb);
    },
    flushSync: () => {
      handOver();
      boom.flushSync();
    },
  } as DestinationStream;
}

/**
 * The chunks' hand-over at exit. pino writes out what sonic-boom holds when the process exits
 * (its own `exit` and `beforeExit` listeners); these listeners, added when this module loads and
 * so before any of pino's, hand sonic-boom the lines still in a chunk first.
 */
const beforeExit: Array<() => void> = [];
const handOverAll = () => {
  for (const handOver of beforeExit) handOver();
};
process.on('beforeExit', handOverAll);
process.on('exit', handOverAll);

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { name: 'zulip-compat-shim' },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination ?? bufferedStdout(),
  );
}

/** `scheme://user:password@` or `//user:password@` at the start of an absolute-form target. */
const USERINFO = /^([a-z][a-z0-9+.-]*:)?\/\/[^/?#@]*@/i;

/**
 * A path fit for a log line (P13): query values can hold secrets (api_key=…), so only the
 * parameter names are kept; an absolute-form target (`GET http://user:password@host/…`) loses
 * its user information.
 */
export function loggablePath(url: string | undefined): string {
  if (!url) return '';
  if (url.charCodeAt(0) !== 47 /* / */ || url.charCodeAt(1) === 47) url = url.replace(USERINFO, '$1//');
  const q = url.indexOf('?');
  if (q < 0) return url;
  const names = url
    .slice(q + 1)
    .split('&')
    .filter(Boolean)
    .map((p) => p.split('=')[0]);
  return `${url.slice(0, q)}?${names.join('&')}`;
}
