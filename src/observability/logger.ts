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

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { name: 'zulip-compat-shim' },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination,
  );
}

/**
 * A path fit for a log line: query values can hold secrets (api_key=…), so only the
 * parameter names are kept.
 */
export function loggablePath(url: string | undefined): string {
  if (!url) return '';
  const q = url.indexOf('?');
  if (q < 0) return url;
  const names = url
    .slice(q + 1)
    .split('&')
    .filter(Boolean)
    .map((p) => p.split('=')[0]);
  return `${url.slice(0, q)}?${names.join('&')}`;
}
