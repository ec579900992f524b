import { readFileSync } from 'node:fs';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRecorder } from '../src/har/recorder.js';
import { createShim } from '../src/server.js';
import { capturedLog } from './support/captured-log.js';
import { logLine, runCli, until } from './support/cli-run.js';
import { startFakeBouncer, type FakeBouncer } from './support/fake-bouncer.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { systemPort } from './support/ports.js';
import { notifyBody } from './support/push-notifications.js';
import { bytesOf, NOTIFY, ORG_ID, ORG_KEY, serverCall } from './support/push-relay.js';
import { findSecret } from './support/secrets.js';
import { testConfig } from './support/shim.js';

/**
 * M7, P13, X8: the old server's bouncer credentials (HTTP Basic: its zulip_org_id and key) go to
 * the bouncer and nowhere else: not into a log line at any level, not into a HAR recording, not
 * into /metrics, also when the bouncer fails, cannot be reached, or the realm cannot be asked.
 */

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const;

let fake: FakeZulip;
let bouncer: FakeBouncer;
beforeAll(async () => {
  fake = await startFake({ era: '7.0' });
  bouncer = await startFakeBouncer();
});
afterAll(async () => {
  await bouncer?.stop();
  await fake?.stop();
});

/** Every path of the relay that logs: success, the bouncer's failure, no bouncer, no realm facts, other calls. */
async function exercise(relayUrl: string, deadBouncer: boolean): Promise<void> {
  await serverCall(relayUrl, 'POST', NOTIFY, bytesOf(notifyBody('7.0', 'message')));
  bouncer.reply = () => ({
    status: 401,
    headers: { 'content-type': 'application/json' },
    body: '{"result":"error","msg":"Invalid API key"}',
  });
  await serverCall(relayUrl, 'POST', NOTIFY, bytesOf(notifyBody('8.0', 'remove')));
  bouncer.reply = (call) => ({ status: 200, body: call.url });
  const elsewhere = notifyBody('7.0', 'message');
  for (const p of [elsewhere.gcm_payload, (elsewhere.apns_payload as { custom: { zulip: unknown } }).custom.zulip] as Record<
    string,
    unknown
  >[])
    p.realm_uri = 'https://not-admitted.example.net';
  await serverCall(relayUrl, 'POST', NOTIFY, bytesOf(elsewhere));
  await serverCall(relayUrl, 'POST', '/api/v1/remotes/server/register', Buffer.from(`zulip_org_id=${ORG_ID}&zulip_org_key=${ORG_KEY}`));
  await serverCall(relayUrl, 'POST', '/api/v1/remotes/push/register', Buffer.from('user_id=10&token=abc&token_kind=1'));
  if (deadBouncer) expect((await serverCall(relayUrl, 'POST', NOTIFY, bytesOf(notifyBody('7.0', 'remove')))).status).toBe(502);
}

describe('no log line at any level holds the credentials', () => {
  it.each(LEVELS)('log level %s', async (level) => {
    const { lines, log } = capturedLog(level);
    for (const bouncerUrl of [bouncer.url, `http://127.0.0.1:${await systemPort()}`]) {
      const config = testConfig(fake.url, {
        push: { relayListen: '127.0.0.1:0', bouncerUrl },
        server: { realmHosts: ['chat.example.com'] },
      });
      const shim = createShim({ config, log, target: fake.url, upstreamId: fake.url });
      try {
        const relay = await shim.listenPushRelay();
        await exercise(relay!.url, bouncerUrl !== bouncer.url);
        const metrics = await shim.context.metrics.registry.metrics();
        expect(findSecret(metrics), 'metrics').toBeUndefined();
      } finally {
        await shim.close();
      }
    }
    for (const [i, line] of lines.entries()) expect(findSecret(line), `line ${i}: ${line.slice(0, 200)}`).toBeUndefined();
    // Not a check of nothing: the failures and the realm that could not be asked were logged.
    if (level === 'trace' || level === 'warn') {
      expect(lines.some((l) => l.includes('push bouncer gave no answer'))).toBe(true);
      expect(lines.some((l) => l.includes("the realm's server_settings could not be had"))).toBe(true);
    }
  });
});

describe('a recording holds neither the credentials nor the relay’s traffic', () => {
  it('with a recorder standing in for the upstream (--record), the HAR has the realm’s server_settings and nothing of the bouncer’s', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'zcs-push-')), 'session.har');
    const { log } = capturedLog('trace');
    const recorder = await startRecorder({ upstream: fake.url, file, log, flushMs: 20 });
    const config = testConfig(fake.url, { push: { relayListen: '127.0.0.1:0', bouncerUrl: bouncer.url } });
    const shim = createShim({ config, log, target: recorder.url, upstreamId: fake.url, retryUpstream: false });
    try {
      const relay = await shim.listenPushRelay();
      await exercise(relay!.url, false);
    } finally {
      await shim.close();
      await recorder.close();
    }
    const har = readFileSync(file, 'utf8');
    expect(findSecret(har)).toBeUndefined();
    const urls = (JSON.parse(har) as { log: { entries: Array<{ request: { url: string } }> } }).log.entries.map((e) => e.request.url);
    expect(urls.some((u) => u.endsWith('/api/v1/server_settings'))).toBe(true);
    expect(urls.filter((u) => u.includes('/remotes/'))).toEqual([]);
  });
});

describe('the CLI, at trace level and recording', { timeout: 60_000 }, () => {
  it('says nothing of the credentials on stdout or stderr, nor in its HAR', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'zcs-push-cli-')), 'session.har');
    const relayPort = await systemPort();
    const run = runCli(['--upstream', fake.url, '--port', '0', '--log-level', 'trace', '--record', file], {
      env: { PUSH_RELAY_LISTEN: `127.0.0.1:${relayPort}`, PUSH_BOUNCER_URL: bouncer.url },
    });
    try {
      const start = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      expect(start).toMatchObject({ pushRelay: `http://127.0.0.1:${relayPort}`, bouncer: bouncer.url });
      await exercise(`http://127.0.0.1:${relayPort}`, false);
      run.child.kill('SIGTERM');
      expect(await run.exited).toBe(0);
    } finally {
      run.child.kill('SIGKILL');
    }
    const said = [...run.stdout, ...run.stderr].join('\n');
    expect(said).toContain('push notification relayed');
    expect(findSecret(said)).toBeUndefined();
    expect(findSecret(readFileSync(file, 'utf8'))).toBeUndefined();
  });
});
