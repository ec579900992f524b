import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ReplayMissError, startReplay, type RunningReplay } from '../src/testing.js';

/**
 * `import { startReplay } from 'zulip-compat-shim/testing'` inside a vitest suite, as a tester
 * uses it: a shim on a free port in front of the bundled demo recording (Zulip 2.1), a client's
 * requests answered with the modern API, and a replay miss reported to the test.
 */

const DEMO = { authorization: `Basic ${Buffer.from('demo@example.com:any-key').toString('base64')}` };

const poll = (url: string, id: number) =>
  fetch(`${url}/api/v1/users/me/presence`, {
    method: 'POST',
    headers: { ...DEMO, 'content-type': 'application/x-www-form-urlencoded' },
    body: `status=active&last_update_id=${id}`,
  });

describe('startReplay with the bundled demo recording', () => {
  let zulip: RunningReplay;
  beforeAll(async () => {
    zulip = await startReplay();
  });
  afterAll(() => zulip.close());

  it('serves the modern presence API in front of a recorded Zulip 2.1 server', async () => {
    expect(zulip.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await poll(zulip.url, -1);
    expect(res.status).toBe(200);
    const full = (await res.json()) as { presences: Record<string, unknown>; presence_last_update_id: number };
    expect(Object.keys(full.presences).length).toBeGreaterThanOrEqual(30);
    const next = await poll(zulip.url, full.presence_last_update_id);
    expect(next.status).toBe(200);
    expect(zulip.misses()).toEqual([]);
  });

  it('answers the modern own-profile and server_settings endpoints from the recording', async () => {
    const settings = await fetch(`${zulip.url}/api/v1/server_settings`);
    expect(settings.status).toBe(200);
    expect(await settings.json()).toMatchObject({ result: 'success', zulip_version: expect.stringMatching(/^2\.1/) });
    const me = await fetch(`${zulip.url}/api/v1/users/me`, { headers: DEMO });
    expect(me.status).toBe(200);
  });
});

describe('a replay miss', () => {
  it('is answered 502, told to onMiss, listed by misses(), and makes close() reject', async () => {
    const told: string[] = [];
    const zulip = await startReplay({
      har: resolve(import.meta.dirname, '..', 'examples', 'demo-zulip-2.1.har'),
      onMiss: (m) => told.push(m),
    });
    const res = await fetch(`${zulip.url}/api/v1/messages?anchor=newest`, { headers: DEMO });
    expect(res.status).toBe(502);
    expect(await res.json()).toMatchObject({ code: 'REPLAY_MISS' });
    expect(told).toEqual([expect.stringMatching(/^GET \/api\/v1\/messages/)]);
    expect(zulip.misses()).toEqual(told);
    const closed = await zulip.close().catch((e: unknown) => e);
    expect(closed).toBeInstanceOf(ReplayMissError);
    expect((closed as ReplayMissError).misses).toEqual(told);
    expect((closed as Error).message).toMatch(/1 request\(s\) had no recorded answer:\n {2}GET \/api\/v1\/messages/);
  });

  it('with failOnMiss: false, close() resolves and misses() still lists it', async () => {
    const zulip = await startReplay({ failOnMiss: false });
    expect((await fetch(`${zulip.url}/api/v1/streams`, { headers: DEMO })).status).toBe(502);
    await zulip.close();
    expect(zulip.misses()).toHaveLength(1);
  });
});

describe('close() with a long poll still open', () => {
  it('ends it and closes at once (well within a hook timeout), not after the 10-s drain', async () => {
    // The demo recording with one long poll that took 60 s: replayed again, it is held that long.
    const dir = mkdtempSync(join(tmpdir(), 'zcs-replay-'));
    const har = JSON.parse(readFileSync(resolve(import.meta.dirname, '..', 'examples', 'demo-zulip-2.1.har'), 'utf8'));
    const entries = har.log.entries as Array<Record<string, unknown> & { request: Record<string, unknown>; time: number }>;
    const events = structuredClone(entries.at(-1)!);
    events.request = { ...events.request, method: 'GET', url: 'http://127.0.0.1:37509/api/v1/events?queue_id=q&last_event_id=-1' };
    delete events.request.postData;
    events.time = 60_000;
    entries.push(events);
    const file = join(dir, 'long-poll.har');
    writeFileSync(file, JSON.stringify(har));
    try {
      const zulip = await startReplay({ har: file });
      const longPoll = `${zulip.url}/api/v1/events?queue_id=q&last_event_id=-1`;
      expect((await fetch(longPoll, { headers: DEMO })).status).toBe(200); // the first: at once
      const held = fetch(longPoll, { headers: DEMO }); // the second: held for the recorded 60 s
      await new Promise((r) => setTimeout(r, 200));
      const started = performance.now();
      await zulip.close();
      const took = performance.now() - started;
      expect(took).toBeLessThan(500);
      // The open long poll was ended with the shim's "restarting" answer, not left hanging.
      expect((await held).status).toBe(503);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
