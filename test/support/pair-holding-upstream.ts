import http, { type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * An upstream that holds each request it is sent until a second one is held beside it (then
 * answers both), or for `aloneMs` when none comes: how many it held at once tells which pool a
 * request took (a one-connection pool never sends the second while the first is held). Releasing
 * on the pair, not on a timer, keeps the answer right however slowly a busy machine sends the
 * second request. Paths with neither `events` nor `held` (decoded) get a 404.
 */
export async function pairHoldingUpstream(aloneMs: number): Promise<{ url: string; mostAtOnce(): number; close(): Promise<void> }> {
  let held: ServerResponse[] = [];
  let most = 0;
  const answer = (res: ServerResponse) => {
    held = held.filter((r) => r !== res);
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"success","msg":"","events":[]}');
  };
  const server = http.createServer((req, res) => {
    const path = decodeURIComponent(req.url ?? '');
    if (!path.includes('events') && !path.includes('held')) {
      res.writeHead(404).end();
      return;
    }
    held.push(res);
    most = Math.max(most, held.length);
    if (held.length >= 2) {
      for (const r of [...held]) answer(r);
      return;
    }
    setTimeout(() => {
      if (held.includes(res)) answer(res);
    }, aloneMs);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    mostAtOnce: () => most,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
