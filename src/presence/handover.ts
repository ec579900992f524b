import type { IncomingMessage } from 'node:http';
import { encodeForm, parseParams } from '../http/body.js';
import { isLedgerId } from './ledger.js';

/**
 * X13: the upstream was upgraded to the modern presence API (feature level 263) while clients
 * hold ids the shim issued. Sent on as they are, such an id means nothing to the upstream: it
 * answers no users and echoes the id, and the client never gets another update. So a poll
 * continuing from a shim id asks the upstream for everything (`last_update_id=-1`); the client
 * gets full data with the upstream's own id and goes on natively. `history_limit_days` goes
 * with it: a modern server ignores it for the positive id the client sent.
 */

/** The request to send in place of one carrying a shim id, or undefined to send it as it came. */
export async function handedOver(req: IncomingMessage, raw: Buffer): Promise<{ path: string; body: Buffer } | undefined> {
  const params = await parseParams(req, raw);
  const id = Number(params.get('last_update_id'));
  if (!isLedgerId(id)) return undefined;
  const handled = (name: string) => name === 'last_update_id' || name === 'history_limit_days';
  const own = await parseParams({ headers: req.headers } as IncomingMessage, raw); // the body's own fields
  const form = own.entries.filter(([name]) => !handled(name));
  form.push(['last_update_id', '-1']);
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const query = q < 0 ? [] : [...new URLSearchParams(url.slice(q + 1))].filter(([name]) => !handled(name));
  const path = (q < 0 ? url : url.slice(0, q)) + (query.length > 0 ? `?${encodeForm(query)}` : '');
  return { path, body: Buffer.from(encodeForm(form)) };
}
