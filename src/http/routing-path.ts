/**
 * The path a Zulip server's router sees for a request target (X6), as its nginx hands it to
 * Django: the path of an absolute-form target, without query or fragment, percent-decoded once,
 * with repeated slashes merged and dot segments removed (RFC 3986 §5.2.4). So
 * `/api/v1/users/%2e%2e/users/me` and `/api/v1//users/me` both route as `/api/v1/users/me`.
 * The result holds one character per decoded byte (latin1), which is all a route needs.
 */
export function routingPath(target: string): string {
  let path = target;
  const scheme = path.startsWith('/') ? null : /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i.exec(path);
  if (scheme) path = path.slice(scheme[0].length);
  const query = path.indexOf('?');
  if (query >= 0) path = path.slice(0, query);
  const fragment = path.indexOf('#');
  if (fragment >= 0) path = path.slice(0, fragment);
  // Most paths need none of the steps below: each runs only where its character is present.
  if (path.includes('%')) path = path.replace(/%([0-9a-f]{2})/gi, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
  if (!path.startsWith('/')) path = `/${path}`;
  if (path.includes('//')) path = path.replace(/\/{2,}/g, '/');
  return path.includes('/.') ? removeDotSegments(path) : path;
}

/** RFC 3986 §5.2.4, for an absolute path. */
export function removeDotSegments(path: string): string {
  const out: string[] = [];
  const segments = path.split('/').slice(1);
  for (const [i, s] of segments.entries()) {
    const last = i === segments.length - 1;
    if (s === '.' || s === '..') {
      if (s === '..') out.pop();
      // A trailing dot segment leaves the path ending in a slash (`/a/b/..` → `/a/`).
      if (last) out.push('');
    } else out.push(s);
  }
  return `/${out.join('/')}`;
}
