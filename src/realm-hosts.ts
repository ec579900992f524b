/**
 * X2's allow-list (`--realm-hosts`): which `Host` values name a realm the shim serves. Checked
 * before anything else, so a made-up host costs neither memory nor an upstream call.
 */

/**
 * A test for `Host` header values. Entries are host names (`chat.example.com`), optionally with a
 * port (then the port must match too), or `*.example.com` for any name below that domain (as in
 * nginx's `server_name`; not `example.com` itself). An empty list admits every host.
 */
export function realmHostMatcher(entries: readonly string[]): (host: string | undefined) => boolean {
  if (entries.length === 0) return () => true;
  const exact = new Set(entries.filter((e) => !e.startsWith('*.')).map((e) => e.toLowerCase()));
  const suffixes = entries.filter((e) => e.startsWith('*.')).map((e) => e.slice(1).toLowerCase());
  return (host) => {
    if (!host) return false;
    const full = host.toLowerCase();
    const name = hostName(full);
    if (exact.has(full) || exact.has(name)) return true;
    return suffixes.some((s) => name.length > s.length && name.endsWith(s));
  };
}

/** The name part of a `Host` value: without its port, IPv6 literals in their brackets. */
export function hostName(host: string): string {
  if (host.startsWith('[')) {
    const close = host.indexOf(']');
    return close < 0 ? host : host.slice(0, close + 1);
  }
  const colon = host.lastIndexOf(':');
  return colon < 0 ? host : host.slice(0, colon);
}
