import type { ArrivingResponse, BufferedResponse, UpstreamCall, UpstreamClient } from './client.js';
import { UpstreamAnswerTooLargeError, upstreamBadResponse } from '../http/errors.js';

/**
 * B7: a buffered upstream call for the answers that grow with a realm (full presence, the user
 * list), bounded by their own budget (memory.largeAnswerBytes) rather than the one for every
 * other intercepted answer. Past it the call fails as E2's bad response and `onTooLarge` is told,
 * so the operator learns once what to raise. Read through the client's one bounded reader, with
 * its total deadline (X3).
 */
export async function fetchLarge(
  client: UpstreamClient,
  call: UpstreamCall,
  maxBytes: number,
  onTooLarge: (bytes: number) => void,
): Promise<BufferedResponse> {
  const r = await fetchLargeHeadFirst(client, call, maxBytes, onTooLarge);
  return { status: r.status, headers: r.headers, body: await r.body };
}

/** `fetchLarge`, resolved when the head arrived (B7: a full presence poll's report is accepted then, P9). */
export async function fetchLargeHeadFirst(
  client: UpstreamClient,
  call: UpstreamCall,
  maxBytes: number,
  onTooLarge: (bytes: number) => void,
): Promise<ArrivingResponse> {
  const r = await client.fetchHeadFirst(call, maxBytes);
  const body = r.body.catch((e: unknown) => {
    if (!(e instanceof UpstreamAnswerTooLargeError)) throw e;
    onTooLarge(e.bytes);
    throw upstreamBadResponse(`body larger than ${maxBytes} bytes (memory.largeAnswerBytes)`);
  });
  return { status: r.status, headers: r.headers, body };
}
