import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { staticDataFor } from '../changes/app-parts.js';
import type { Added } from '../changes/index.js';
import type { StaticDataChange } from '../changes/types.js';
import type { LayerStateKey, ShimContext } from '../context.js';
import { sendEncoded } from '../http/compress.js';
import { sendShimError, upstreamUnavailable } from '../http/errors.js';
import { recordFacts, timedUpstream } from '../observability/request-facts.js';
import type { Realm } from '../upstream/realm.js';
import { isSuccess } from '../upstream/relay.js';

/**
 * M2, StaticDataChange (the emoji names, feature level 140): what a newer server serves at a URL
 * its register answer names, built by the shim from an older upstream's own static file, kept,
 * and served to the app on the realm's URL. Built from the upstream's file only: where the file
 * cannot be had, the URL answers the shim's 502 and serves nothing else (the app goes without the
 * names and asks again with backoff); the register answer always names it, as the app's parsers
 * require (M3; docs/mobile-app.md §8).
 */

/**
 * The largest source file read (a server's emoji_codes.json is some hundreds of KiB): what is
 * kept per upstream stays small whatever the upstream sends.
 */
export const STATIC_SOURCE_MAX_BYTES = 4 * 1024 * 1024;

/** One built answer: its bytes and the ETag they are served with. */
interface Built {
  body: Buffer;
  etag: string;
  /** When it was built (Date.now()), for featureLevel.ttlMs. */
  at: number;
}

/**
 * The built data of one upstream, one entry per StaticDataChange (bounded by the registry: one
 * today), each from at most STATIC_SOURCE_MAX_BYTES of source. Kept per shim, which has one
 * upstream: the file is the server's, the same for every realm it serves.
 */
class StaticDataCache {
  private readonly built = new Map<string, Built>();
  private readonly loading = new Map<string, Promise<Built | undefined>>();
  /** When the source last could not be had (Date.now()), by path: not asked again for featureLevel.failureTtlMs. */
  private readonly failed = new Map<string, number>();

  /**
   * The data, built at most featureLevel.ttlMs ago; past that it is built again, and a failed
   * rebuild keeps what was built before, and the source is not asked again for
   * featureLevel.failureTtlMs. Undefined when it was never had. Single flight.
   */
  async get(ctx: Pick<ShimContext, 'config' | 'log' | 'client'>, realm: Realm, change: StaticDataChange): Promise<Built | undefined> {
    const held = this.built.get(change.path);
    if (held && Date.now() - held.at < ctx.config.featureLevel.ttlMs) return held;
    // X2: the path is fetched without credentials; a missing file is not asked for on every request.
    const failedAt = this.failed.get(change.path);
    if (failedAt !== undefined && Date.now() - failedAt < ctx.config.featureLevel.failureTtlMs) return held;
    let load = this.loading.get(change.path);
    if (!load) {
      load = build(ctx, realm, change).finally(() => this.loading.delete(change.path));
      this.loading.set(change.path, load);
    }
    const fresh = await load;
    if (fresh) {
      this.built.set(change.path, fresh);
      this.failed.delete(change.path);
    } else this.failed.set(change.path, Date.now());
    return fresh ?? held;
  }
}

/** The upstream's source file, read through the one upstream client and built; undefined (logged) when it cannot be. */
async function build(
  ctx: Pick<ShimContext, 'config' | 'log' | 'client'>,
  realm: Realm,
  change: StaticDataChange,
): Promise<Built | undefined> {
  const why = await (async (): Promise<string | Built> => {
    try {
      const call = { realm, method: 'GET' as const, path: change.source, headers: { accept: 'application/json' } };
      const r = await ctx.client.fetch(call, Math.min(STATIC_SOURCE_MAX_BYTES, ctx.config.upstream.maxResponseBytes));
      if (!isSuccess(r.status)) return `the upstream answered ${r.status}`;
      const data = change.build(JSON.parse(r.body.toString('utf8')));
      if (data === undefined) return 'the file does not hold what the data is built from';
      const body = Buffer.from(JSON.stringify(data));
      return { body, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`, at: Date.now() };
    } catch (e) {
      return e instanceof SyntaxError ? 'the file is not JSON' : `the upstream could not be read (${(e as Error).message})`;
    }
  })();
  if (typeof why !== 'string') return why;
  ctx.log.warn({ source: change.source, field: change.field, reason: why }, "app: the upstream's static file could not be had");
  return undefined;
}

/** The shim's StaticDataCache (context.ts LayerState). */
const STATIC_DATA: LayerStateKey<StaticDataCache> = { name: "the app's static data, built" };
const cacheOf = (ctx: StaticDataContext): StaticDataCache => ctx.layerState.of(STATIC_DATA, () => new StaticDataCache());

/** What the static data's builders and server use of the shim. */
export type StaticDataContext = Pick<ShimContext, 'config' | 'log' | 'client' | 'layerState'>;

/** The realm's URL as the register answer names it (`realm_url` from 9.0, `realm_uri` before), without a trailing slash. */
function realmUrlOf(answer: Record<string, unknown>): string | undefined {
  const url = typeof answer.realm_url === 'string' ? answer.realm_url : answer.realm_uri;
  return typeof url === 'string' && /^https?:\/\//i.test(url) ? url.replace(/\/+$/, '') : undefined;
}

/**
 * M2, register answers up: the URL of each static data an app shown `shown` needs in front of an
 * upstream at `real`, absolute on the realm's URL (the app fetches it as it is, unresolved). Always
 * named, whether or not the data can be had yet (M3: the app's parsers require the key; its fetch
 * of the URL is apart from its register, retried with backoff, and the app goes without the names
 * meanwhile); the data's loading starts here, without holding the answer. Left out, with a
 * warning, only where the answer names no realm URL to put it on.
 */
export function addStaticDataUrls(
  ctx: StaticDataContext,
  realm: Realm,
  answer: Record<string, unknown>,
  real: number,
  shown: number,
  added: Added,
): void {
  for (const change of staticDataFor(real, shown)) {
    if (change.field in answer) continue;
    const url = realmUrlOf(answer);
    if (url === undefined) {
      ctx.log.warn({ field: change.field }, "app register: a key the app's level has is left out, the answer names no realm URL");
      continue;
    }
    void cacheOf(ctx).get(ctx, realm, change);
    answer[change.field] = `${url}${change.path}`;
    added.added.push(change.field);
    added.sources[change.field] = 'lookup';
  }
}

/**
 * The app's GET of a static data's path (STATIC_DATA_PATHS) in front of an upstream below its
 * level: the built data, with an ETag (304 to an If-None-Match that names it), cacheable for as
 * long as the shim keeps it; the shim's 502 where it cannot be had (the app tries again later).
 */
export async function serveStaticData(
  req: IncomingMessage,
  res: ServerResponse,
  ctx: StaticDataContext,
  realm: Realm,
  change: StaticDataChange,
): Promise<void> {
  const data = await timedUpstream(req, () => cacheOf(ctx).get(ctx, realm, change));
  recordFacts(req).kind = 'app-translated';
  if (!data) return sendShimError(res, upstreamUnavailable(`the upstream's ${change.source} could not be had`));
  const headers = { etag: data.etag, 'cache-control': `public, max-age=${Math.floor(ctx.config.featureLevel.ttlMs / 1000)}` };
  if (req.headers['if-none-match'] === data.etag) {
    res.writeHead(304, headers);
    res.end();
    return;
  }
  await sendEncoded(req, res, 200, { raw: data.body }, headers);
}
