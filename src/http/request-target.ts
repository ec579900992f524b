import type { IncomingMessage } from 'node:http';

/**
 * X15: the request target as the upstream will be asked for it. An absolute-form target
 * (`GET http://chat.example.com/api/v1/… HTTP/1.1`, as proxies are sent) is the authority the
 * client means, whatever its `Host` says (RFC 9112 §3.2.2): the shim keys the realm by that
 * authority and sends the request on in origin form with it as `Host`, so the shim and the
 * upstream never disagree on the realm. Returns false for a target that is no URL at all.
 */
export function toOriginForm(req: IncomingMessage): boolean {
  const target = req.url ?? '';
  if (target.startsWith('/') || target === '*') return true;
  if (!/^https?:\/\//i.test(target)) return true; // not absolute-form: the router words its own answer
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    return false;
  }
  req.url = `${url.pathname}${url.search}`;
  req.headers.host = url.host;
  // The raw header list follows, for anything that copies headers from it.
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    if (req.rawHeaders[i]!.toLowerCase() === 'host') req.rawHeaders[i + 1] = url.host;
  }
  return true;
}

/** A WebSocket upgrade (the only one the shim passes on); any other `Upgrade` is offered and may be ignored. */
export function isWebSocketUpgrade(req: IncomingMessage): boolean {
  return (req.headers.upgrade ?? '')
    .toLowerCase()
    .split(/\s*,\s*/)
    .includes('websocket');
}

/**
 * X15: a request offering another upgrade (`Upgrade: h2c`, RFC 7540 §3.2): a server that does
 * not take it up answers the request as HTTP/1.1, as if the offer had not been made. The
 * offer's headers go, so the upstream sees the plain request.
 */
export function withoutUpgradeOffer(req: IncomingMessage): void {
  delete req.headers.upgrade;
  delete req.headers['http2-settings'];
  const connection = (req.headers.connection ?? '')
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '' && !/^(upgrade|http2-settings)$/i.test(t));
  if (connection.length > 0) req.headers.connection = connection.join(', ');
  else delete req.headers.connection;
}
