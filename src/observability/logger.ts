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
/** The lines are encoded into chunks of this size, each handed to the writer whole. */
export const CHUNK_BYTES = 16 * 1024;

/**
 * Log lines encoded straight into a 16 KB chunk, each chunk handed to `to` whole once the next
 * line would not fit; a line too long for a chunk goes on its own. `handOver` hands over what
 * the current chunk holds now (a copy: the chunk itself is kept for the next lines, so a partly
 * filled chunk never holds 16 KB while it waits to be written).
 */
export class LineChunks {
  private chunk: Buffer | undefined;
  private used = 0;

  constructor(private readonly to: { write(bytes: Buffer): unknown }) {}

  write(line: string): void {
    // UTF-8 takes at most three bytes for each UTF-16 unit.
    const most = line.length * 3;
    if (most > CHUNK_BYTES) {
      this.handOver();
      this.to.write(Buffer.from(line));
      return;
    }
    if (this.chunk && this.used + most > CHUNK_BYTES) {
      this.to.write(this.chunk.subarray(0, this.used));
      this.chunk = undefined;
    }
    if (!this.chunk) {
      this.chunk = Buffer.allocUnsafeSlow(CHUNK_BYTES);
      this.used = 0;
    }
    this.used += this.chunk.write(line, this.used);
  }

  handOver(): void {
    if (!this.chunk || this.used === 0) return;
    this.to.write(Buffer.from(this.chunk.subarray(0, this.used)));
    this.used = 0;
  }
}

/**
 * Each stdout logger's writes at exit, run by one `exit` listener for all of them, added with the
 * first stdout logger: importing this module adds none (an application embedding the shim may
 * never make one). A logger closed (closeLogger) takes its own out.
 */
const exitFlushes: Array<() => void> = [];
let exitListener = false;
function flushAtExit(flush: () => void): void {
  exitFlushes.push(flush);
  if (exitListener) return; // the listener is there since the first
  exitListener = true;
  process.on('exit', () => {
    for (const f of exitFlushes) {
      try {
        f();
      } catch {
        // stdout closed or broken at exit: nothing more can be written.
      }
    }
  });
}

/** How a stdout logger's destination is closed (closeLogger). */
const closers = new WeakMap<object, () => void>();

/**
 * stdout through a buffer, written out every FLUSH_EVERY_MS (and at exit): a request log line
 * written synchronously cost the pass-through ~40% of its throughput (bench B4).
 *
 * The lines go into chunks (LineChunks), and sonic-boom (pino.destination, in its buffer mode)
 * is handed whole chunks, which it writes out in order, without blocking. A Buffer made for
 * each line, as sonic-boom's own batching needs, cost a passed-through request about 2 µs of
 * the main thread's CPU (B4: 22,100 → 23,150 req/s): a small Buffer a line, the 8 KB pool slabs
 * they are cut from, and the batch's concatenation. (In its string mode sonic-boom measures the
 * whole pending batch with Buffer.byteLength on every write.)
 *
 * sonic-boom starts a write by itself only once more than one chunk waits (`minLength`), so a
 * chunk handed over at exit waits for the synchronous flush there instead of starting a write
 * the exiting process would not wait for.
 */
function bufferedStdout(): DestinationStream {
  const boom = pino.destination({ dest: 1, sync: false, minLength: CHUNK_BYTES + 1, maxWrite: 4 * CHUNK_BYTES, contentMode: 'buffer' });
  const toBoom = { write: (bytes: Buffer) => boom.write(bytes as unknown as string) };
  const lines = new LineChunks(toBoom);
  let closed = false;
  const flushNow = () => {
    // Whatever waits first, then the lines still in the chunk, each written before the process goes.
    boom.flushSync();
    lines.handOver();
    boom.flushSync();
  };
  flushAtExit(flushNow);
  const timer = setInterval(() => {
    lines.handOver();
    boom.flush();
  }, FLUSH_EVERY_MS).unref();
  const stream = {
    write: (line: string) => {
      lines.write(line);
      // Closed: no timer and no exit flush left to write it out later.
      if (closed) flushNow();
    },
    flush: (cb?: (err?: Error) => void) => {
      lines.handOver();
      boom.flush(cb);
    },
    flushSync: () => {
      lines.handOver();
      boom.flushSync();
    },
  } as DestinationStream;
  closers.set(stream, () => {
    if (closed) return;
    closed = true;
    clearInterval(timer);
    flushNow();
    const at = exitFlushes.indexOf(flushNow);
    if (at >= 0) exitFlushes.splice(at, 1);
  });
  return stream;
}

/**
 * A logger done with (an embedded shim closed): what waits is written now, and a stdout logger's
 * timer and exit flush go with it, so making and closing many loggers leaves nothing behind. A
 * line logged later is written at once. Harmless on any other logger, and when called again.
 */
export function closeLogger(log: Logger): void {
  const dest = (log as unknown as Record<symbol, object | undefined>)[pino.symbols.streamSym];
  if (dest) closers.get(dest)?.();
}

/** How many stdout loggers have their writes waiting for the process's exit (for tests). */
export function exitFlushCount(): number {
  return exitFlushes.length;
}

/** The destination of each logger createLogger made (see destinationOf). */
const destinations = new WeakMap<Logger, DestinationStream>();

export function createLogger(level: string, destination?: DestinationStream): Logger {
  const dest = destination ?? bufferedStdout();
  const log = pino(
    {
      level,
      base: { name: 'zulip-compat-shim' },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    dest,
  );
  destinations.set(log, dest);
  return log;
}

/**
 * The destination a logger made by createLogger writes to: the request log writes its lines,
 * already in pino's format, there (request-log.ts), beside the logger's own lines and in order
 * with them. Undefined for any other logger (an embedding application's own pino instance).
 */
export function destinationOf(log: Logger): DestinationStream | undefined {
  return destinations.get(log);
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
