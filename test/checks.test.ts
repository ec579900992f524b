import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeStore, probeUpstream, warnAtStartup } from '../src/checks.js';
import { StoreUnavailableError } from '../src/store/types.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';

/** The probes of --check, also run at start-up: what each says of an upstream and a store. */

describe('probeUpstream', () => {
  let fake: FakeZulip;
  let other: http.Server;
  let otherUrl: string;
  let mode: 'html' | 'json' | 'broken' = 'html';
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    // A web server that is no Zulip: it answers as `mode` says.
    other = http.createServer((_req, res) => {
      if (mode === 'broken') res.writeHead(500).end('oops');
      else if (mode === 'json') res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      else res.writeHead(200, { 'content-type': 'text/html' }).end('<html>hello</html>');
    });
    await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
    otherUrl = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await fake.stop();
    await new Promise((r) => other.close(r));
  });

  it('a Zulip server: its version, feature level and realm', async () => {
    const p = await probeUpstream(fake.url, 'zulip');
    expect(p.ok).toBe(true);
    expect(p.line).toMatch(/^upstream zulip: Zulip 2\.1\.7, feature level 0, realm /);
  });

  it.each([
    ['html', /^upstream web: answers, but is not a Zulip server/],
    ['json', /^upstream web: answers, but is not a Zulip server/],
    ['broken', /^upstream web: does not answer \(server_settings answered HTTP 500\)$/],
  ] as const)('%s: not ok', async (answer, line) => {
    mode = answer;
    const p = await probeUpstream(otherUrl, 'web');
    expect(p).toMatchObject({ ok: false, line: expect.stringMatching(line) });
  });

  it('nothing listening: does not answer', async () => {
    const p = await probeUpstream('http://127.0.0.1:1', 'gone');
    expect(p).toMatchObject({ ok: false, line: expect.stringMatching(/^upstream gone: does not answer \(.+\)$/) });
  });
});

describe('probeStore', () => {
  it.each([
    [
      { kind: 'memory' as const, ping: async () => {} },
      { ok: true, line: 'store: in this process' },
    ],
    [
      { kind: 'redis' as const, ping: async () => {} },
      { ok: true, line: 'store: Redis answers' },
    ],
    [
      {
        kind: 'redis' as const,
        ping: () => Promise.reject(new StoreUnavailableError('Redis store: connect ECONNREFUSED', 'unreachable')),
      },
      { ok: false, line: 'store: Redis does not answer (unreachable)' },
    ],
  ])('%#', async (store, found) => {
    expect(await probeStore(store)).toEqual(found);
  });
});

describe('warnAtStartup', () => {
  it('one warning per failed probe, none for the ones that answered', async () => {
    const lines: string[] = [];
    const log = { warn: (msg: string) => lines.push(msg) } as unknown as Parameters<typeof warnAtStartup>[0];
    await warnAtStartup(log, {
      upstream: async () => ({ ok: false, line: 'upstream x: does not answer (refused)' }),
      store: async () => ({ ok: true, line: 'store: in this process' }),
    });
    await warnAtStartup(log, { store: async () => ({ ok: false, line: 'store: Redis does not answer (unreachable)' }) });
    expect(lines).toEqual([
      'start-up check: upstream x: does not answer (refused); serving anyway',
      'start-up check: store: Redis does not answer (unreachable); serving anyway',
    ]);
  });
});
