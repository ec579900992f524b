import type { BufferedResponse, UpstreamCall, UpstreamClient } from './client.js';
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
  try {
    return await client.fetch(call, maxBytes);
  } catch (e) {
    if (!(e instanceof UpstreamAnswerTooLargeError)) throw e;
    onTooLarge(e.bytes);
    throw upstreamBadResponse(`body larger than ${maxBytes} bytes (memory.largeAnswerBytes)`);
  }
}
