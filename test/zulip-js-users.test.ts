import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { compileSchema } from './support/schema.js';
import { startShim, type RunningShim } from './support/shim.js';

/** A real client library (zulip-js, npm) reading user objects through the shim from a 2.1 server (V1). */

interface ZulipJs {
  users: { retrieve(params?: Record<string, string>): Promise<Record<string, unknown>> };
  callEndpoint(path: string, method: string, params?: Record<string, string>): Promise<Record<string, unknown>>;
}
// zulip-js is CommonJS without types.
const zulipInit = createRequire(import.meta.url)('zulip-js') as (config: Record<string, string>) => Promise<ZulipJs>;

const validateUser = compileSchema('user-base.schema.json');

describe('zulip-js through the shim on a 2.1 upstream', () => {
  let fake: FakeZulip;
  let shim: RunningShim;
  let client: ZulipJs;

  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url);
    const me = fake.user(13);
    client = await zulipInit({ realm: shim.url, username: me.email, apiKey: me.api_key });
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });

  it('users.retrieve() gets modern user objects', async () => {
    const r = await client.users.retrieve({ include_custom_profile_fields: 'true' });
    expect(r.result).toBe('success');
    const members = r.members as Record<string, unknown>[];
    expect(members).toHaveLength(fake.users.length);
    for (const m of members) expect(validateUser(m) ? [] : validateUser.errors).toEqual([]);
    expect(members.find((m) => m.user_id === 10)).toMatchObject({ role: 200, is_owner: false, delivery_email: null }); // 2.1 has no owners;
    expect(members.find((m) => m.is_bot)).toMatchObject({ bot_owner_id: 10, bot_owner: fake.user(10).email });
    expect(members.find((m) => m.user_id === 13)).toMatchObject({
      delivery_email: fake.user(13).delivery_email,
      profile_data: fake.user(13).profile_data,
    });
    // The request went upstream as zulip-js sent it.
    expect(fake.seen.some((s) => s.url === '/api/v1/users?include_custom_profile_fields=true')).toBe(true);
  });

  it('a single user by id, which 2.1 does not have', async () => {
    const r = await client.callEndpoint('/users/12', 'GET');
    expect(r.result).toBe('success');
    expect(validateUser(r.user)).toBe(true);
    expect(r.user).toMatchObject({ user_id: 12, role: 400, is_owner: false });
  });
});
