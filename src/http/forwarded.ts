import type { IncomingMessage } from 'node:http';
import { BlockList, isIP } from 'node:net';

/**
 * X4: the peers whose X-Forwarded-Host/Proto the shim believes (`--trust-proxy`, a CIDR list,
 * default none). Node's `net.BlockList` does the matching, IPv4 and IPv6; an IPv4-mapped IPv6
 * peer (`::ffff:10.0.0.1`, a dual-stack listener) is matched as the IPv4 address it is.
 */
export class TrustedProxies {
  private readonly list = new BlockList();
  readonly size: number;

  constructor(cidrs: readonly string[]) {
    for (const cidr of cidrs) {
      const parsed = parseCidr(cidr);
      if (!parsed) throw new Error(`not an IP address or CIDR range: ${cidr}`);
      this.list.addSubnet(parsed.address, parsed.prefix, parsed.family);
    }
    this.size = cidrs.length;
  }

  trusts(address: string | undefined): boolean {
    if (!address || this.size === 0) return false;
    const v4 = address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : undefined;
    if (v4) return this.list.check(v4, 'ipv4');
    const family = isIP(address);
    return family !== 0 && this.list.check(address, family === 4 ? 'ipv4' : 'ipv6');
  }
}

/** `10.0.0.0/8`, `fd00::/8`, or a single address (a /32 or /128). Undefined when it is neither. */
export function parseCidr(text: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | undefined {
  const [address = '', prefixText, ...rest] = text.trim().split('/');
  const kind = isIP(address);
  if (kind === 0 || rest.length > 0) return undefined;
  const max = kind === 4 ? 32 : 128;
  if (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) return undefined;
  const prefix = prefixText === undefined ? max : Number(prefixText);
  if (prefix > max) return undefined;
  return { address, prefix, family: kind === 4 ? 'ipv4' : 'ipv6' };
}

/**
 * X4 at the door, before anything reads them: a client's own X-Forwarded-Host and
 * X-Forwarded-Proto are dropped unless its peer address is a trusted proxy, so the shim's view
 * (`Host`, its listener's scheme) is what goes upstream. X-Forwarded-For is kept and appended
 * to (setXForwarded), as nginx's `$proxy_add_x_forwarded_for` does.
 */
export function distrustForwarded(req: IncomingMessage, trusted: TrustedProxies): void {
  const h = req.headers;
  if (h['x-forwarded-host'] === undefined && h['x-forwarded-proto'] === undefined) return;
  if (trusted.trusts(req.socket.remoteAddress)) return;
  delete h['x-forwarded-host'];
  delete h['x-forwarded-proto'];
}

/**
 * The client's address, for what is bounded per client (X11's uploads per address): the peer's,
 * or where the peer is a trusted proxy (X4), the last address in X-Forwarded-For that is not one
 * itself, as nginx's `real_ip_recursive on` reads it. An IPv4-mapped IPv6 peer is its IPv4
 * address. A value in X-Forwarded-For that is not an address ends the walk there.
 */
export function clientAddress(req: IncomingMessage, trusted: TrustedProxies): string {
  const peer = unmapped(req.socket.remoteAddress ?? '');
  const listed = req.headers['x-forwarded-for'];
  if (!listed || !trusted.trusts(peer)) return peer;
  const hops = String(listed).split(',');
  let client = peer;
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = unmapped(hops[i]!.trim());
    if (isIP(hop) === 0) break;
    client = hop;
    if (!trusted.trusts(hop)) break;
  }
  return client;
}

const unmapped = (address: string) => (address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address);

const first = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

/**
 * X-Forwarded-For/Proto/Host for a request the shim sends upstream (T1), written into its
 * outgoing headers (`into`, which may be `req.headers` itself: all three are read first); one
 * rule for the pass-through (HTTP and WebSocket) and the shim's own calls. The client's address
 * is appended to X-Forwarded-For; Proto and Host keep what a trusted proxy in front of the shim
 * said (a TLS terminator's `https`; see distrustForwarded), else the shim's own view. Appending
 * to Proto (`https,http`) would break Zulip releases whose Django compares the whole value with
 * `https`.
 */
export function setXForwarded(req: IncomingMessage, into: Record<string, string | string[] | undefined>): void {
  const remote = req.socket.remoteAddress ?? '';
  const prior = first(req.headers['x-forwarded-for']);
  const proto = first(req.headers['x-forwarded-proto']) || ((req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http');
  const host = first(req.headers['x-forwarded-host']) || (req.headers.host ?? '');
  into['x-forwarded-for'] = prior ? `${prior}, ${remote}` : remote;
  into['x-forwarded-proto'] = proto;
  into['x-forwarded-host'] = host;
}
