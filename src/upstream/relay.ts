import type { ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';
import type { BufferedResponse, UpstreamResponse } from './client.js';
import type { Bounded } from '../http/body.js';
import { endToEnd } from '../http/headers.js';

const headersOf = (h: UpstreamResponse['headers']) => endToEnd(h);

/** E1: an upstream answer goes to the client as it came, status, headers and body. */
export async function relay(res: ServerResponse, r: UpstreamResponse): Promise<void> {
  res.writeHead(r.status, headersOf(r.headers));
  await pipeline(r.body, res);
}

/**
 * E1: an upstream answer that was not a success, read whole, for the caller to get unchanged
 * (relayBuffered): a value a handler returns on, not an error (the upstream refused the caller's
 * report, or its realm's server_settings).
 */
export interface Refused {
  refused: BufferedResponse;
}

export const isRefused = (v: object): v is Refused => 'refused' in v;

/**
 * A lookup of server_settings that the upstream refused, as the failure of that lookup
 * (feature-level.ts remembers it, /readyz and the push relay count it as one); a handler gets
 * it as Refused (FeatureLevels.resolve).
 */
export class UpstreamRefused extends Error {
  constructor(
    readonly response: BufferedResponse,
    message = `upstream answered ${response.status}`,
  ) {
    super(message);
  }
}

export function relayBuffered(res: ServerResponse, r: BufferedResponse): void {
  const headers = headersOf(r.headers);
  headers['content-length'] = String(r.body.length);
  res.writeHead(r.status, headers);
  res.end(r.body);
}

/**
 * Headers for an answer the shim re-serialised from an upstream success: the upstream's,
 * minus the ones that described the old body.
 */
export function rewrittenHeaders(h: UpstreamResponse['headers']): Record<string, string | string[]> {
  const out = headersOf(h);
  delete out['content-length'];
  delete out['content-encoding'];
  delete out.etag;
  out['content-type'] = 'application/json';
  return out;
}

export const isSuccess = (status: number) => status >= 200 && status < 300;

/** An upstream answer read up to a limit, as it came: buffered when it was read whole, else what was read and the rest streamed. */
export async function relayBounded(res: ServerResponse, r: UpstreamResponse, bounded: Bounded): Promise<void> {
  if (bounded.whole) return relayBuffered(res, { status: r.status, headers: r.headers, body: bounded.body });
  res.writeHead(r.status, headersOf(r.headers));
  for (const c of bounded.head) res.write(c);
  await pipeline(bounded.rest, res);
}
