import type { IncomingMessage } from 'node:http';
import { BlockList, isIP } from 'node:net';

const first = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

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
export function distrustForwarded(req: IncomingMessage, trusted: TrustedProxies): { proto: string } | undefined {
  const h = req.headers;
  if (h['x-forwarded-host'] === undefined && h['x-forwarded-proto'] === undefined) return undefined;
  if (trusted.trusts(req.socket.remoteAddress)) return undefined;
  const proto = first(h['x-forwarded-proto']);
  delete h['x-forwarded-host'];
  delete h['x-forwarded-proto'];
  // What was replaced, where it differs from what goes on instead (the listener's scheme).
  return proto !== undefined && proto.trim().toLowerCase() !== ownScheme(req) ? { proto } : undefined;
}

/** The scheme of the shim's own listener for this request. */
const ownScheme = (req: IncomingMessage) => ((req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http');

/**
 * Issue 48: an X-Forwarded-Proto the shim replaced (its peer is not in `--trust-proxy`) is said
 * once a realm (by `Host`): usually a TLS proxy in front that is not named, and Zulip then takes
 * that realm's browser calls for plain HTTP (the CSRF 403). At most `max` realms are
 * remembered (X2); past them, nothing more is said.
 */
export class ReplacedProtoWarnings {
  private readonly said = new Set<string>();

  constructor(
    private readonly warn: (w: { realm: string; peer: string; sent: string; sentOn: string }) => void,
    private readonly max = 1000,
  ) {}

  replaced(req: IncomingMessage, sent: string): void {
    // A Host name is at most 253 characters; a longer one is cut (the set stays small, X2).
    const realm = (req.headers.host ?? '').slice(0, 260).toLowerCase();
    if (this.said.has(realm) || this.said.size >= this.max) return;
    this.said.add(realm);
    this.warn({ realm, peer: req.socket.remoteAddress ?? '', sent: sent.slice(0, 40), sentOn: ownScheme(req) });
  }
}

/**
 * The client a request comes from, for what is counted per client (X12's new realms, X11's
 * uploads) and for the access line: its peer, or, where the peer is a trusted proxy (X4), the
 * nearest address in X-Forwarded-For that is not one, as nginx's `real_ip_recursive` finds it;
 * what a client wrote further left is its own claim and not believed. An entry that is not an
 * address ends the walk; an IPv4-mapped IPv6 address is its IPv4 address.
 */
export function clientAddressOf(req: IncomingMessage, trusted: TrustedProxies): string {
  let address = unmapped(req.socket.remoteAddress ?? '');
  if (!trusted.trusts(address)) return address;
  const header = req.headers['x-forwarded-for'];
  const hops = (Array.isArray(header) ? header.join(',') : (header ?? '')).split(',');
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = unmapped(hops[i]!.trim());
    if (isIP(hop) === 0) break;
    address = hop;
    if (!trusted.trusts(hop)) break;
  }
  return address;
}

const unmapped = (address: string) => (address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address);

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
