import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { badRequest, endSocketWithShimError, malformedRequest, MethodNotAllowedError } from './errors.js';
import { declaresBody } from './headers.js';
import { withoutUpgradeOffer } from './request-target.js';

/**
 * What Node hands the server outside its `request` event, each answered as Zulip would shape it
 * (E4: an answer, not a dropped connection): an upgrade other than WebSocket, a request its
 * parser refuses, a CONNECT.
 */

/**
 * X15: a request Node handed over as an upgrade, answered as an ordinary one instead: a
 * response on its socket, the offer's headers gone. Its body, if it declares one, was never
 * parsed (Node stops at an upgrade's head): such a request gets a 400, not a guess.
 */
export function answerWithoutUpgrade(
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  onRequest: (req: IncomingMessage, res: ServerResponse) => void,
): void {
  socket.on('error', () => socket.destroy());
  if (declaresBody(req.headers) || head.length > 0) {
    endSocketWithShimError(socket, badRequest('An upgrade other than WebSocket cannot carry a request body here'));
    return;
  }
  withoutUpgradeOffer(req);
  req.push(null); // no body: the request stream ends, as Node's parser would end it
  const res = new http.ServerResponse(req);
  res.shouldKeepAlive = false;
  res.assignSocket(socket as Socket);
  res.once('finish', () => {
    res.detachSocket(socket as Socket);
    socket.end();
  });
  onRequest(req, res);
}

/** Statuses for requests Node's parser refuses (as Node itself answers them). */
const CLIENT_ERROR_STATUS: Readonly<Record<string, number>> = {
  HPE_HEADER_OVERFLOW: 431,
  HPE_CHUNK_EXTENSIONS_OVERFLOW: 413,
  ERR_HTTP_REQUEST_TIMEOUT: 408,
};

/**
 * A request Node's parser refused: answered as Node itself would, but only where no answer to
 * an earlier request is being written (Node's own rule).
 */
export function answerClientError(err: Error, socket: Duplex, debug: (facts: object, msg: string) => void): void {
  const code = (err as NodeJS.ErrnoException).code;
  const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (code !== 'ECONNRESET' && socket.writable && !inFlight?.headersSent) {
    const status = CLIENT_ERROR_STATUS[code ?? ''] ?? 400;
    endSocketWithShimError(socket, malformedRequest(status));
  } else socket.destroy();
  debug({ err: { code } }, 'client error');
}

/** No tunnels through the shim (E4: an answer all the same, not a dropped connection). */
export function refuseConnect(_req: IncomingMessage, socket: Duplex): void {
  socket.on('error', () => socket.destroy());
  endSocketWithShimError(socket, new MethodNotAllowedError('CONNECT is not supported'));
}
