import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { legacySettingTypes, USER_SETTINGS_5_0, userSettingsOf } from '../src/changes/fl089-user-settings.js';
import { ERAS, startFake, type Era, type FakeZulip } from './support/fake-zulip.js';
import { compileSchema, expectValid, matchesSchema } from './support/schema.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * V3, W1: register's `user_settings` where the upstream lacks it is whole for Zulip 5.0
 * (feature level 122, the first release with it) or absent; the client's other keys are as the
 * upstream sent them, and nothing the shim asked for on its own is left in the answer.
 */

const settings50 = compileSchema('user-settings-5.0.schema.json');
const expectUserBase = matchesSchema('user-base.schema.json');
const KEYS_50 = Object.keys((settings50.schema as { properties: Record<string, unknown> }).properties);

/** The old server's fixed behaviour, per era: the settings it has no setting for. */
const FIXED: Record<number, string[]> = {
  0: [
    'default_view',
    'escape_navigates_to_default_view',
    'enable_drafts_synchronization',
    'email_notifications_batching_period_seconds',
    'enable_marketing_emails',
    'presence_enabled',
    'send_private_typing_notifications',
    'send_stream_typing_notifications',
    'send_read_receipts',
  ],
  25: [
    'default_view',
    'escape_navigates_to_default_view',
    'enable_drafts_synchronization',
    'email_notifications_batching_period_seconds',
    'enable_marketing_emails',
    'send_private_typing_notifications',
    'send_stream_typing_notifications',
    'send_read_receipts',
  ],
  65: [
    'escape_navigates_to_default_view',
    'enable_drafts_synchronization',
    'email_notifications_batching_period_seconds',
    'enable_marketing_emails',
    'send_private_typing_notifications',
    'send_stream_typing_notifications',
    'send_read_receipts',
  ],
};

describe('the 5.0 settings table', () => {
  it('holds exactly the keys of Zulip 5.0’s user_settings, each once', () => {
    const keys = USER_SETTINGS_5_0.map((s) => s.key);
    expect(new Set(keys).size).toBe(keys.length);
    expect([...keys].sort()).toEqual([...KEYS_50].sort());
  });

  it.each([0, 25, 65])('at feature level %i: whole from the legacy settings, the rest the old server’s behaviour', async (level) => {
    const fake = await startFake({ era: level === 0 ? '2.1' : level === 25 ? '3.0' : '4.0' });
    try {
      const u = fake.user(12);
      u.presence_enabled = false;
      const legacy = fake.legacySettings(u, () => true);
      const built = userSettingsOf(legacy, level);
      if ('missing' in built) throw new Error(`missing ${built.missing}`);
      expectValid(settings50, built.settings);
      expect(built.fixed).toEqual(FIXED[level]);
      // The user's own values where the server has the setting.
      expect(built.settings.timezone).toBe(u.timezone);
      expect(built.settings.color_scheme).toBe(2); // 2.1's night_mode: true
      expect(built.settings.presence_enabled).toBe(level === 0); // 2.1 has no invisible mode
      expect(built.settings.default_view).toBe(level >= 42 ? 'recent_topics' : 'all_messages');
    } finally {
      await fake.stop();
    }
  });

  it('builds nothing when a setting the server has is missing from its answer (W1)', () => {
    const legacy = { twenty_four_hour_time: true, enter_sends: false };
    expect(userSettingsOf(legacy, 0)).toEqual({ missing: 'dense_mode' });
    const fake = { ...Object.fromEntries(USER_SETTINGS_5_0.map((s) => [s.key, s.key === 'presence_enabled' ? 1 : true])) };
    // A value of the wrong type is no value: the object is not built.
    expect('missing' in userSettingsOf(fake, 122 - 1)).toBe(true);
  });

  it('names the legacy types per era', () => {
    expect(legacySettingTypes(0).sort()).toEqual(['realm_user', 'update_display_settings', 'update_global_notifications']);
  });
});

/** What zulip-terminal does with a register answer: with user_settings, it reads every key. */
function terminalClientReads(answer: Record<string, unknown>): void {
  if ('user_settings' in answer) {
    const s = answer.user_settings as Record<string, unknown>;
    for (const key of ['send_private_typing_notifications', 'twenty_four_hour_time', 'pm_content_in_desktop_notifications']) {
      if (!(key in s)) throw new Error(`KeyError: '${key}'`);
    }
  }
}

const TYPES = ['user_settings', 'realm_user', 'update_display_settings', 'update_global_notifications', 'presence'] as const;
/** Every set of those types, and "every type" (no fetch_event_types). */
const COMBINATIONS: Array<readonly string[] | undefined> = [
  undefined,
  ...Array.from({ length: 2 ** TYPES.length }, (_, mask) => TYPES.filter((_, i) => mask & (1 << i))),
];

describe.each(ERAS.filter((e) => e !== '9.0') as Era[])('register on %s: every fetch_event_types combination (V1, V3, V5, W1)', (era) => {
  let fake: FakeZulip;
  let shim: RunningShim;
  beforeAll(async () => {
    fake = await startFake({ era });
    shim = await startShim(fake.url, { presence: { coalesceMs: 0 } });
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });

  it('user_settings and every user object are whole for the level they claim, or absent; nothing asked for by the shim stays', async () => {
    for (const types of COMBINATIONS) {
      const form: Record<string, string> = types ? { fetch_event_types: JSON.stringify(types), event_types: '["message"]' } : {};
      const res = await request(shim.url).post('/api/v1/register').set('Authorization', fake.auth(12)).type('form').send(form);
      const why = `${era} ${JSON.stringify(types)}`;
      expect(res.status, why).toBe(200);
      const asked = types === undefined || types.includes('user_settings');
      expect('user_settings' in res.body, why).toBe(asked);
      if (asked && fake.featureLevel < 89) expectValid(settings50, res.body.user_settings);
      terminalClientReads(res.body);
      // Every user object the answer holds is whole too (V1, V5), bots included.
      for (const list of ['realm_users', 'realm_non_active_users', 'cross_realm_bots']) {
        for (const u of (res.body[list] ?? []) as unknown[]) expectUserBase(u);
      }
      // The answer holds what the client's own request gets from the upstream, and user_settings.
      const direct = await request(fake.url).post('/api/v1/register').set('Authorization', fake.auth(12)).type('form').send(form);
      const expected = Object.keys(direct.body).filter((k) => k !== 'queue_id');
      const added = ['user_settings', 'server_presence_ping_interval_seconds', 'server_presence_offline_threshold_seconds'];
      const got = Object.keys(res.body).filter(
        (k) => k !== 'queue_id' && !added.includes(k) && k !== 'presence_last_update_id' && k !== 'server_timestamp',
      );
      expect(got.sort(), why).toEqual(expected.filter((k) => k !== 'server_timestamp' && !added.includes(k)).sort());
      if (asked && fake.featureLevel < 89) {
        const named = String(res.headers['x-zulip-compat-backfilled']).split(',');
        expect(named, why).toContain('user_settings');
        expect(
          named.filter((n) => n.startsWith('user_settings.')).map((n) => n.slice('user_settings.'.length)),
          why,
        ).toEqual(FIXED[fake.featureLevel]);
      }
    }
  });
});

describe('the types the shim asks for on the client’s behalf (V3)', () => {
  let fake: FakeZulip;
  let shim: RunningShim;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url);
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });

  it('event_types alone: fetched with the legacy types, the queue’s own types unchanged', async () => {
    const res = await request(shim.url)
      .post('/api/v1/register')
      .set('Authorization', fake.auth(12))
      .type('form')
      .send({ event_types: '["user_settings","message"]' });
    expect(res.status).toBe(200);
    expectValid(settings50, res.body.user_settings);
    expect(res.body).not.toHaveProperty('realm_users');
    const sent = fake.seen.filter((r) => r.url === '/api/v1/register').at(-1)!;
    const form = new URLSearchParams(sent.body.toString());
    expect(form.get('event_types')).toBe('["user_settings","message"]');
    expect(JSON.parse(form.get('fetch_event_types')!)).toEqual([
      'user_settings',
      'message',
      'update_display_settings',
      'realm_user',
      'update_global_notifications',
    ]);
  });

  it('a multipart register is sent on as a form with the same fields', async () => {
    const res = await request(shim.url)
      .post('/api/v1/register')
      .set('Authorization', fake.auth(12))
      .field('fetch_event_types', '["user_settings"]')
      .field('apply_markdown', 'true');
    expect(res.status).toBe(200);
    expectValid(settings50, res.body.user_settings);
    const sent = new URLSearchParams(
      fake.seen
        .filter((r) => r.url === '/api/v1/register')
        .at(-1)!
        .body.toString(),
    );
    expect(sent.get('apply_markdown')).toBe('true');
  });
});
