import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeBouncer, type BouncerCall, type FakeBouncer } from './support/fake-bouncer.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { judgeAt } from './support/app-parsers.js';
import {
  fcmData,
  notifyBody,
  payloadsOf,
  REALM_NAME,
  REALM_URL,
  type PushEra,
  type PushKind,
  type PushRecipient,
} from './support/push-notifications.js';
import { bytesOf, NOTIFY, serverCall, serverHeaders, SERVER_AUTH } from './support/push-relay.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * M7: the push relay between an old server and its bouncer. A 7.0 and an 8.0 notification of
 * each kind, as those servers send them, leave the relay with `realm_url` and `realm_name` in
 * both payloads and nothing else changed, and satisfy the app's legacy notification parser as it
 * ships after its server-9 sweep (refs/pull/2436/head, the judge's fixture).
 */

type Json = Record<string, unknown>;
const judge = judgeAt('sweep-2436');

interface Relayed {
  shim: RunningShim;
  relayUrl: string;
}

async function startRelay(fake: FakeZulip, bouncer: FakeBouncer, over: Record<string, unknown> = {}): Promise<Relayed> {
  const shim = await startShim(fake.url, { push: { relayListen: '127.0.0.1:0', bouncerUrl: bouncer.url }, ...over });
  const at = await shim.shim.listenPushRelay();
  return { shim, relayUrl: at!.url };
}

/** `body` without the keys the relay may add where its era lacks them. */
function withoutAdded(body: Json, era: PushEra): Json {
  const copy = structuredClone(body);
  const { gcm, apns } = payloadsOf(copy);
  for (const p of [gcm, apns]) {
    delete p.realm_url;
    if (era === '7.0') delete p.realm_name;
  }
  return copy;
}

const lastCall = (bouncer: FakeBouncer): BouncerCall => bouncer.calls[bouncer.calls.length - 1]!;

const CASES: Array<[PushEra, PushKind, PushRecipient]> = [
  ['7.0', 'message', 'stream'],
  ['7.0', 'message', 'group'],
  ['7.0', 'message', 'dm'],
  ['7.0', 'remove', 'stream'],
  ['8.0', 'message', 'stream'],
  ['8.0', 'message', 'group'],
  ['8.0', 'message', 'dm'],
  ['8.0', 'remove', 'stream'],
];

describe.each(['7.0', '8.0'] as const)('notifications from a %s server', (era) => {
  let fake: FakeZulip;
  let bouncer: FakeBouncer;
  let relay: Relayed;
  beforeAll(async () => {
    fake = await startFake({ era });
    bouncer = await startFakeBouncer();
    relay = await startRelay(fake, bouncer);
  });
  afterAll(async () => {
    await relay?.shim.close();
    await bouncer?.stop();
    await fake?.stop();
  });

  it.each(CASES.filter(([e]) => e === era))(
    '%s %s (%s): realm_url and realm_name in both payloads, nothing else changed, the app parses it',
    async (_e, kind, to) => {
      const sent = notifyBody(era, kind, to);
      const before = payloadsOf(sent);
      // As the server sends it, the app at the sweep cannot parse it: the judge can fail.
      expect(judge.parseProblems('LegacyFcmMessage', fcmData(before.gcm))).not.toEqual([]);

      const answer = await serverCall(relay.relayUrl, 'POST', NOTIFY, bytesOf(sent), serverHeaders(era));
      expect(answer.status).toBe(200);
      const call = lastCall(bouncer);
      expect(call.method).toBe('POST');
      expect(call.url).toBe(NOTIFY);
      const got = JSON.parse(call.body.toString('utf8')) as Json;
      const after = payloadsOf(got);
      for (const p of [after.gcm, after.apns]) {
        expect(p.realm_url).toBe(REALM_URL);
        expect(p.realm_uri).toBe(REALM_URL);
        expect(p.realm_name).toBe(REALM_NAME);
      }
      expect(withoutAdded(got, era)).toEqual(withoutAdded(sent, era));
      // Byte for byte: the server's text, each added member written last in its object.
      const expected = structuredClone(sent);
      for (const p of Object.values(payloadsOf(expected))) {
        if (era === '7.0') p.realm_name = REALM_NAME;
        p.realm_url = REALM_URL;
      }
      expect(call.body.toString('utf8')).toBe(JSON.stringify(expected));
      // The server's own keys first, in its order; what was added after them.
      expect(Object.keys(after.gcm).slice(0, Object.keys(before.gcm).length)).toEqual(Object.keys(before.gcm));
      expect(judge.parseProblems('LegacyFcmMessage', fcmData(after.gcm))).toEqual([]);
      // The credentials and the server's headers go on; only Host names the bouncer.
      expect(call.headers.authorization).toBe(SERVER_AUTH);
      expect(call.headers['user-agent']).toBe(`ZulipServer/${era}`);
      expect(call.headers['content-type']).toBe('application/json');
      expect(call.headers['content-length']).toBe(String(call.body.length));
      expect(call.headers.host).toBe(new URL(bouncer.url).host);
      expect(call.headers['x-forwarded-for']).toBeUndefined();
    },
  );

  it('asks the realm its server_settings once, for all of its notifications', async () => {
    for (const kind of ['message', 'remove'] as const) await serverCall(relay.relayUrl, 'POST', NOTIFY, bytesOf(notifyBody(era, kind)));
    const asked = fake.seen.filter((s) => s.url === '/api/v1/server_settings');
    expect(asked.map((s) => s.headers.host)).toEqual(['chat.example.com']);
  });
});

describe('what the relay passes on as it came', () => {
  let fake: FakeZulip;
  let bouncer: FakeBouncer;
  let relay: Relayed;
  beforeAll(async () => {
    fake = await startFake({ era: '8.0' });
    bouncer = await startFakeBouncer();
    relay = await startRelay(fake, bouncer);
  });
  afterEach(() => {
    bouncer.reply = (call) => ({
      status: 200,
      headers: { 'content-type': 'application/json' },
      body: call.url.includes('notify')
        ? '{"result":"success","msg":"","total_android_devices":1,"total_apple_devices":0}'
        : '{"result":"success","msg":""}',
    });
  });
  afterAll(async () => {
    await relay?.shim.close();
    await bouncer?.stop();
    await fake?.stop();
  });

  const FORM = 'application/x-www-form-urlencoded';
  const calls: Array<[string, string, string | undefined, string]> = [
    [
      'POST',
      '/api/v1/remotes/server/register',
      'zulip_org_id=x&zulip_org_key=y&hostname=chat.example.com&contact_email=admin%40example.com',
      FORM,
    ],
    ['POST', '/api/v1/remotes/push/register', 'user_uuid=4f1b&user_id=10&token=abc%3D%3D&token_kind=2&ios_app_id=org.zulip.Zulip', FORM],
    ['POST', '/api/v1/remotes/push/unregister/all', 'user_uuid=4f1b&user_id=10', FORM],
    [
      'POST',
      '/api/v1/remotes/server/analytics',
      'realm_counts=%5B%5D&installation_counts=%5B%5D&realmauditlog_rows=%5B%5D&version=%228.0%22',
      FORM,
    ],
    ['GET', '/api/v1/remotes/server/analytics/status', undefined, FORM],
    [
      'POST',
      '/api/v1/remotes/push/test_notification',
      '{"realm_uuid":"0b5a","user_uuid":"4f1b","user_id":10,"token":"t","token_kind":2,"base_payload":{"realm_uri":"https://chat.example.com"}}',
      'application/json',
    ],
    ['POST', '/some/other/path?x=1&y=%2F', 'anything at all', 'text/plain'],
  ];

  it.each(calls)('%s %s: to the bouncer byte for byte, its answer back as it came', async (method, path, body, type) => {
    bouncer.reply = () => ({
      status: 201,
      headers: { 'content-type': 'application/json', 'x-bouncer': 'yes', 'retry-after': '7' },
      body: '{"result":"success","msg":"bouncer\'s own bytes"}',
    });
    const sent = body === undefined ? undefined : Buffer.from(body);
    const answer = await serverCall(relay.relayUrl, method, path, sent, serverHeaders('8.0', type));
    const call = lastCall(bouncer);
    expect(call.method).toBe(method);
    expect(call.url).toBe(path);
    expect(call.body.equals(sent ?? Buffer.alloc(0))).toBe(true);
    // Host names the bouncer; Connection is each hop's own.
    const { host: _h, connection: _k, ...rest } = call.headers;
    const { connection: _c, ...expected }: Record<string, string> = {
      ...serverHeaders('8.0', type),
      ...(sent ? { 'content-length': String(sent.length) } : {}),
    };
    expect(rest).toEqual(expected);
    expect(answer.status).toBe(201);
    expect(answer.body.toString()).toBe('{"result":"success","msg":"bouncer\'s own bytes"}');
    expect(answer.headers).toMatchObject({ 'content-type': 'application/json', 'x-bouncer': 'yes', 'retry-after': '7' });
  });

  it('a notification with every field already (a 9.0 server) goes on byte for byte, its realm not asked', async () => {
    const modern = notifyBody('8.0', 'message');
    for (const p of Object.values(payloadsOf(modern))) p.realm_url = REALM_URL;
    const sent = Buffer.from(`${JSON.stringify(modern, null, 1)}\n`); // any spelling: not re-serialised
    fake.seen = [];
    await serverCall(relay.relayUrl, 'POST', NOTIFY, sent);
    expect(lastCall(bouncer).body.equals(sent)).toBe(true);
    expect(fake.seen).toEqual([]);
  });

  it("keeps the server's own spelling of everything else: spacing, escapes, numbers JavaScript cannot hold", async () => {
    const text = `{ "user_id" : 10, "big": 12345678901234567890123, "gcm_payload" : {"realm_uri":"https://chat.example.com" , "user_id":10,"event":"remove","zulip_message_ids":"1,2","n":1.0,"s":"caf\\u00e9 \\"}\\" {"} , "apns_payload":{"custom":{"zulip":{ "realm_uri" : "https://chat.example.com" }},"badge":0} }`;
    await serverCall(relay.relayUrl, 'POST', NOTIFY, Buffer.from(text));
    expect(lastCall(bouncer).body.toString()).toBe(
      text
        .replace('"s":"caf\\u00e9 \\"}\\" {"}', '"s":"caf\\u00e9 \\"}\\" {","realm_url":"https://chat.example.com"}')
        .replace('"https://chat.example.com" }}', '"https://chat.example.com" ,"realm_url":"https://chat.example.com"}}'),
    );
  });

  it.each([
    ['not JSON', Buffer.from('user_id=10&gcm_payload=x'), FORM],
    ['JSON but not an object', Buffer.from('[1,2,3]'), 'application/json'],
    ['payloads that are not objects', bytesOf({ user_id: 10, gcm_payload: 'x', apns_payload: null }), 'application/json'],
  ])('a notify body %s goes on byte for byte', async (_what, sent, type) => {
    await serverCall(relay.relayUrl, 'POST', NOTIFY, sent, serverHeaders('8.0', type));
    expect(lastCall(bouncer).body.equals(sent)).toBe(true);
  });

  it('E1: a bouncer that fails gets the server its failure as it came', async () => {
    for (const [status, body] of [
      [503, '{"result":"error","msg":"Service unavailable","code":"BAD_REQUEST"}'],
      [401, '{"result":"error","msg":"Invalid API key","code":"INVALID_ZULIP_SERVER"}'],
      [400, '{"result":"error","msg":"Invalid GCM option to bouncer: priority \'x\'","code":"BAD_REQUEST"}'],
    ] as const) {
      bouncer.reply = () => ({ status, headers: { 'content-type': 'application/json', 'retry-after': '30' }, body });
      const answer = await serverCall(relay.relayUrl, 'POST', NOTIFY, bytesOf(notifyBody('7.0', 'message')));
      expect(answer.status).toBe(status);
      expect(answer.body.toString()).toBe(body);
      expect(answer.headers['retry-after']).toBe('30');
    }
  });

  it('/metrics counts notifications relayed and changed by kind, and bouncer errors', async () => {
    const before = await relay.shim.shim.context.metrics.registry.metrics();
    const count = (text: string, line: string) =>
      Number(new RegExp(`^${line.replace(/[{}"]/g, '\\$&')} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
    await serverCall(relay.relayUrl, 'POST', NOTIFY, bytesOf(notifyBody('7.0', 'remove')));
    bouncer.reply = () => ({ status: 502, body: 'bad gateway' });
    await serverCall(relay.relayUrl, 'POST', NOTIFY, bytesOf(notifyBody('7.0', 'message')));
    const after = await relay.shim.shim.context.metrics.registry.metrics();
    const changed = (kind: string) => `zulip_compat_shim_push_notifications_total{kind="${kind}",changed="true"}`;
    expect(count(after, changed('remove')) - count(before, changed('remove'))).toBe(1);
    expect(count(after, changed('message')) - count(before, changed('message'))).toBe(1);
    const errors = 'zulip_compat_shim_push_bouncer_errors_total{reason="http_5xx"}';
    expect(count(after, errors) - count(before, errors)).toBe(1);
  });
});
