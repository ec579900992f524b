import { translate, type BufferedResponse, type UpstreamCall, type UpstreamClient } from './client.js';
import { ShimError, upstreamBadResponse } from '../http/errors.js';

/**
 * B7: a buffered upstream call for the answers that grow with a realm (full presence, the user
 * list), bounded by their own budget (memory.largeAnswerBytes) rather than the one for every
 * other intercepted answer. Past it the call fails as E2's bad response and `onTooLarge` is told,
 * so the operator learns once what to raise.
 */
export async function fetchLarge(
  client: UpstreamClient,
  call: UpstreamCall,
  maxBytes: number,
  onTooLarge: (bytes: number) => void,
): Promise<BufferedResponse> {
  const r = await client.request(call);
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of r.body) {
      size += (chunk as Buffer).length;
      if (size > maxBytes) {
        r.body.destroy();
        onTooLarge(size);
        throw upstreamBadResponse(`body larger than ${maxBytes} bytes (memory.largeAnswerBytes)`);
      }
      chunks.push(chunk as Buffer);
    }
  } catch (e) {
    if (e instanceof ShimError) throw e;
    throw translate(e);
  }
  return { status: r.status, headers: r.headers, body: Buffer.concat(chunks, size) };
}
