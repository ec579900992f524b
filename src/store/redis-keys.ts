/**
 * Every Redis key the shim writes is named here, and only here.
 *
 * Shape: `<prefix>{<realm>}:<kind><rest>`. The braces are a Redis Cluster hash tag: every key of
 * one realm (its ledger, its snapshots and their locks, its lookup caches) hashes to the same
 * slot, so each Lua script and multi-key command touches one slot, and one node, on a Redis Cluster.
 * A single Redis or a Sentinel-managed primary ignores the braces.
 *
 * Realm-scoped names (realm keys, snapshot scopes, lookup keys) all begin with the realm key
 * `<upstream>|<host>` (upstream/realm.ts); the tag is that part: the name up to its second `|`.
 * Braces in the prefix and the tag are percent-encoded, so the tag is always the first `{…}`
 * and always the whole realm (Redis hashes from the first `{` to the first `}` after it, or
 * the whole key when that is empty).
 */

/** What a key holds. */
export type KeyKind = 'presence' | 'presence-changes' | 'snap' | 'snap-legacy' | 'snap-lock' | 'cache' | 'admitted';

/** The realm part of a realm-scoped name: up to its second `|` (the whole name if it has fewer). */
export function realmTag(name: string): string {
  const first = name.indexOf('|');
  if (first < 0) return name;
  const second = name.indexOf('|', first + 1);
  return second < 0 ? name : name.slice(0, second);
}

const escapeTag = (text: string) => text.replace(/[%{}]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

/**
 * The key for `name` (a realm key, or a name beginning with one) of the given kind; `sub`
 * names a part inside the kind (a lookup cache's name) and goes before the rest of the name.
 */
export function redisKey(prefix: string, kind: KeyKind, name: string, sub?: string): string {
  const tag = realmTag(name);
  return `${escapeTag(prefix)}{${escapeTag(tag)}}:${kind}${sub === undefined ? '' : `:${sub}`}${name.slice(tag.length)}`;
}
