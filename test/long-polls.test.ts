import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { send } from './support/http-client.js';
import { pairHoldingUpstream } from './support/pair-holding-upstream.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * T1, E4: every connected Zulip client holds a long poll (GET /events, ~90 s) all the time. More
 * waiting clients than upstream.maxSockets must not hold the rest of the pass-through back:
 * a message sent while they wait is answered before any of them.
 */

let fake: FakeZulip;
let shim: RunningShim;
beforeAll(async () => {
  fake = await startFake({ era: '5.0' });
  shim = await startShim(fake.url, { upstream: { maxSockets: 4 } });
});
afterAll(async () => {
  await shim?.close();
  await fake?.stop();
});

it('long polls beyond maxSockets do not hold other pass-through requests back', async () => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const order: string[] = [];
  try {
    const polls = Array.from({ length: 12 }, (_, i) =>
      send(
        shim.url,
        {
          method: 'GET',
          path: '/api/v1/events?queue_id=q&last_event_id=-1&delay_ms=4000',
          headers: { authorization: fake.auth(10 + (i % 5)) },
        },
        { agent, timeoutMs: 30_000 },
      ).then((a) => {
        order.push('long poll');
        return a;
      }),
    );
    // Every long poll has reached the upstream and is being held there.
    for (let i = 0; i < 200 && (fake.stats.requests.get('GET /api/v1/events') ?? 0) < 12; i++) await new Promise((r) => setTimeout(r, 25));
    expect(fake.stats.requests.get('GET /api/v1/events')).toBe(12);
    const other = await send(
      shim.url,
      { method: 'GET', path: '/api/v1/users', headers: { authorization: fake.auth(11) } },
      { agent, timeoutMs: 30_000 },
    );
    order.push('other request');
    expect(other.status).toBe(200);
    const answers = await Promise.all(polls);
    expect(answers.map((a) => a.status)).toEqual(Array(12).fill(200));
    expect(order[0]).toBe('other request');
  } finally {
    agent.destroy();
  }
}, 60_000);

describe('T1: the pool is the router’s decision, made on the path the upstream routes', () => {
  /** Two GETs of `path` at once through a shim with one pass-through connection; how many the upstream held at once. */
  async function heldAtOnce(path: string, longPoll: boolean): Promise<number> {
    const up = await pairHoldingUpstream(longPoll ? 5_000 : 300);
    const url = up.url;
    const one = await startShim(url, { upstream: { maxSockets: 1 }, server: { realmHosts: [] } });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
    try {
      const answers = await Promise.all(
        [1, 2].map(() => send(one.url, { method: 'GET', path, headers: { host: 'chat.example.com' } }, { agent, timeoutMs: 10_000 })),
      );
      expect(answers.map((a) => a.status)).toEqual([200, 200]);
      return up.mostAtOnce();
    } finally {
      agent.destroy();
      await one.close();
      await up.close();
    }
  }

  it.each(['/api/v1/events?queue_id=q', '/api/v1//events?queue_id=q', '/json/x/../events?queue_id=q', '/api/v1/%65vents?queue_id=q'])(
    'GET %s: a long poll, held beside another, past the one connection',
    async (path) => {
      expect(await heldAtOnce(path, true)).toBe(2);
    },
  );

  it('GET /api/v1/held: not a long poll, one after the other on the one connection', async () => {
    expect(await heldAtOnce('/api/v1/held', false)).toBe(1);
  });
});
