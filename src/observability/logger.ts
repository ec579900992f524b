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

/**
 * stdout through a buffer, written out every FLUSH_EVERY_MS (and by pino on exit): a request log
 * line written synchronously cost the pass-through ~40% of its throughput (bench B4).
 *
 * sonic-boom (pino.destination) in its buffer mode, fed one Buffer a line. In its default mode
 * it appends each line to the pending string and measures that string with Buffer.byteLength on
 * every write, which copies the whole pending batch each time: 4.3 KB copied for each request
 * log line with 8 KB batches, a fifth of all a pass-through request allocated (measured with B4;
 * commit 6e34453). In buffer mode it keeps the lines as a list and joins them once per write.
 */
function bufferedStdout(): DestinationStream {
  const boom = pino.destination({ dest: 1, sync: false, minLength: 8 * 1024, contentMode: 'buffer' });
  setInterval(() => boom.flush(), FLUSH_EVERY_MS).unref();
  return {
    write: (line: string) => boom.write(Buffer.from(line) as unknown as string),
    flush: (cb?: (err?: Error) => void) => boom.flush(cb),
    flushSync: () => boom.flushSync(),
  } as DestinationStream;
}

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
