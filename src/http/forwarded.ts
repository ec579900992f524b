import type { IncomingMessage } from 'node:http';

/**
 * X-Forwarded-For/Proto/Host for requests the shim sends upstream (T1), one rule for the
 * pass-through and the shim's own calls: the client's address is appended to
 * X-Forwarded-For; Proto and Host keep what a proxy in front of the shim already said (a TLS
 * terminator's `https`), else the shim's own view. Appending to Proto (`https,http`) would
 * break Zulip releases whose Django compares the whole value with `https`.
 */
export function forwardedHeaders(req: IncomingMessage): {
  'x-forwarded-for': string;
  'x-forwarded-proto': string;
  'x-forwarded-host': string;
} {
  const first = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);
  const remote = req.socket.remoteAddress ?? '';
  const prior = first(req.headers['x-forwarded-for']);
  const proto = first(req.headers['x-forwarded-proto']) || ((req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http');
  return {
    'x-forwarded-for': prior ? `${prior}, ${remote}` : remote,
    'x-forwarded-proto': proto,
    'x-forwarded-host': first(req.headers['x-forwarded-host']) || (req.headers.host ?? ''),
  };
}
