import fc from 'fast-check';
import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  answerChangesFor,
  editRegister,
  endpointKey,
  MAX_MESSAGE_LENGTH,
  registerAdditions,
  TRANSLATED_ENDPOINTS,
  translateAnswer,
  translateRequest,
} from '../src/changes/app-parts.js';
import { TOPIC_WILDCARD_REFUSAL } from '../src/changes/fl224-topic-wildcard.js';
import { FormFields } from '../src/http/form-fields.js';
import {
  CHANGE_IDS,
  CHANGES,
  changeIdsOf,
  changeIdsOfFields,
  checkedBundle,
  emulatedFeatures,
  USER_CHANGES,
} from '../src/changes/index.js';
import { invisibleMode } from '../src/changes/fl003-invisible-mode.js';
import { FL } from '../src/upstream/feature-level.js';
import type { ApiChange } from '../src/changes/types.js';
import { editOutsideCode } from '../src/changes/markdown-text.js';
import { sentAs } from './support/app-content.js';
import { MARKDOWN_SHAPES, outsideProse } from './support/markdown-shapes.js';
import { judgeAt } from './support/app-parsers.js';
import { eraAnswer, eraEvents } from './support/era-answers.js';

/**
 * U2, V1, M2: one registry of API changes, both directions. Each change is one module naming its
 * feature level; user-object parts fill every caller's user objects, request parts put the
 * mobile app's requests into an older upstream's form.
 */

describe('the one registry', () => {
  it('holds every change module of src/changes/ (flNNN-…), at the feature level its name gives, in that order', async () => {
    const dir = new URL('../src/changes/', import.meta.url);
    const modules = readdirSync(dir).filter((f) => /^fl\d{3}-.*\.ts$/.test(f));
    expect(modules.length).toBeGreaterThan(0);
    for (const file of modules) {
      const exported = Object.values(await import(new URL(file, dir).href)) as unknown[];
      const changes = exported.filter((v): v is ApiChange => typeof v === 'object' && v !== null && 'featureLevel' in v && 'feature' in v);
      expect(changes.length, file).toBeGreaterThan(0);
      for (const change of changes) {
        expect([file, change.featureLevel]).toEqual([file, Number(file.slice(2, 5))]);
        expect(CHANGES.includes(change), `${file}: ${change.feature} is not in CHANGES`).toBe(true);
      }
    }
    expect(CHANGES.map((c) => c.featureLevel)).toEqual(CHANGES.map((c) => c.featureLevel).sort((x, y) => x - y));
    expect(USER_CHANGES).toEqual(CHANGES.filter((c) => c.user !== undefined));
  });

  it('refuses changes out of feature-level order, and takes several at one level (as Zulip’s changelog has them)', () => {
    const adds = (featureLevel: number, feature: string) => ({ featureLevel, feature, register: { fields: [feature], fill: () => ({}) } });
    expect(() => checkedBundle([adds(4, 'a'), adds(3, 'b')])).toThrow('feature level 3 (b) is below 4');
    expect(checkedBundle([adds(4, 'a'), adds(4, 'b')])).toHaveLength(2);
  });

  it('refuses a change that changes nothing, and a register key added twice', () => {
    expect(() => checkedBundle([{ featureLevel: 3, feature: 'nothing' }])).toThrow('nothing changes nothing');
    const adds = (featureLevel: number, feature: string) => ({
      featureLevel,
      feature,
      register: { fields: ['k'], fill: () => ({ k: 1 }) },
    });
    expect(() => checkedBundle([adds(3, 'a'), adds(4, 'b')])).toThrow('field k introduced twice (again at 4)');
  });

  it('declares invisible mode (3) as a server behaviour: in the registry at the level own-report reads, never in T2', () => {
    expect(CHANGES).toContain(invisibleMode);
    expect([invisibleMode.featureLevel, FL.INVISIBLE_MODE]).toEqual([3, 3]);
    for (const level of [0, 2, 3]) expect(emulatedFeatures(level)).not.toContain(invisibleMode.feature);
    const both = { featureLevel: 3, feature: 'both', serverBehaviour: { by: 'a.ts' }, emulation: { by: 'a.ts' } };
    expect(() => checkedBundle([both])).toThrow('both is a server behaviour the shim takes into account: it bridges nothing');
  });

  it('names endpoints with a path segment of digits as {id}', () => {
    expect(endpointKey('PATCH', '/messages/123')).toBe('PATCH /messages/{id}');
    expect(endpointKey('GET', '/messages')).toBe('GET /messages');
    expect(endpointKey('GET', '/users/me/12/topics')).toBe('GET /users/me/{id}/topics');
    expect([...TRANSLATED_ENDPOINTS].sort()).toEqual([
      'GET /events',
      'GET /messages',
      'GET /messages/{id}',
      'PATCH /messages/{id}',
      'POST /fetch_api_key',
      'POST /messages',
      'POST /messages/flags/narrow',
      'POST /typing',
      'POST /user_topics',
    ]);
  });
});

describe('feature level 247: @**channel** as @**stream**, outside code', () => {
  it.each([
    ['@**channel** lunch!', '@**stream** lunch!'],
    ['quiet @_**channel**', 'quiet @_**stream**'],
    ['@**channel** and @**channel**', '@**stream** and @**stream**'],
    ['@**all** @**Channel Bot|12** @**channels**', '@**all** @**Channel Bot|12** @**channels**'],
    ['write `@**channel**` to ping', 'write `@**channel**` to ping'],
    ['``a ` @**channel** `` @**channel**', '``a ` @**channel** `` @**stream**'],
    ['an unclosed ` then @**channel**', 'an unclosed ` then @**stream**'],
    ['```\n@**channel**\n```\n@**channel**', '```\n@**channel**\n```\n@**stream**'],
    // A quote or spoiler block holds Markdown, its mentions notify; a code block inside it is code (unclosed: to the end).
    ['~~~ quote\n@**channel**\n```\n@**channel**\n~~~\n@**channel**', '~~~ quote\n@**stream**\n```\n@**channel**\n~~~\n@**channel**'],
    ['```spoiler Lunch\n@**channel** pizza!\n```\n@**channel**', '```spoiler Lunch\n@**stream** pizza!\n```\n@**stream**'],
    ['```quoted\n```py\n@**channel**\n```\n@**channel**\n```', '```quoted\n```py\n@**channel**\n```\n@**stream**\n```'],
    // A block ends only at the same fence; a fence opens one only at the start of a line.
    ['```\ncode\n````\n@**channel**', '```\ncode\n````\n@**channel**'],
    ['    ```\n@**channel**', '    ```\n@**stream**'],
    ['> ```\n> @**channel**', '> ```\n> @**stream**'],
    ['````\n```\n@**channel**\n````\n@**channel**', '````\n```\n@**channel**\n````\n@**stream**'],
    ['```\nnever closed @**channel**', '```\nnever closed @**channel**'],
    ['> @**channel**\r\n```py\r\n@**channel**\r\n```\r\n@**channel**', '> @**stream**\r\n```py\r\n@**channel**\r\n```\r\n@**stream**'],
  ])('%j → %j', (content, expected) => {
    expect(sentAs(content)).toBe(expected);
  });

  it('changes nothing but the mentions: code, and any text without one, stay as sent', () => {
    const text = fc
      .array(fc.constantFrom('a', ' ', '\n', '`', '~', '>', '@', '*', '_', 'channel', '```', '~~~', '@**channel**'), { maxLength: 40 })
      .map((parts) => parts.join(''));
    fc.assert(
      fc.property(text, (content) => {
        expect(editOutsideCode(content, (s) => s)).toBe(content);
        const out = sentAs(content);
        expect(out.replaceAll('@**stream**', '@**channel**').replaceAll('@_**stream**', '@_**channel**')).toBe(
          content.replaceAll('@**stream**', '@**channel**').replaceAll('@_**stream**', '@_**channel**'),
        );
        expect(sentAs(out)).toBe(out);
      }),
    );
  });
});

describe('register answers the app can parse (204, 273)', () => {
  it('adds the typing periods below 204 and no thumbnail formats below 273, with the values the old servers behave with', () => {
    expect(registerAdditions(185, 277)).toEqual({
      server_typing_started_expiry_period_milliseconds: 15000,
      server_typing_stopped_wait_period_milliseconds: 5000,
      server_typing_started_wait_period_milliseconds: 10000,
      server_thumbnail_formats: [],
    });
    expect(registerAdditions(237, 277)).toEqual({ server_thumbnail_formats: [] });
    expect(registerAdditions(273, 277)).toEqual({});
    expect(registerAdditions(185, 203)).toEqual({}); // a client shown 203 expects neither
  });
});

describe('register answers and events of a 5.x server, for the app (125 to 138; 5.x not served yet)', () => {
  const at5 = () => {
    const answer = eraAnswer('register', 122);
    editRegister(answer, 122, 277);
    return Object.assign(answer, registerAdditions(122, 277));
  };

  it('125: user_settings gains display_emoji_reaction_users false; one the upstream sent is kept', () => {
    expect((at5().user_settings as Record<string, unknown>).display_emoji_reaction_users).toBe(false);
    const sent = { user_settings: { display_emoji_reaction_users: true } };
    editRegister(sent, 122, 277);
    expect(sent.user_settings.display_emoji_reaction_users).toBe(true);
  });

  it('131: every user group gains direct_subgroup_ids [], in register and in user_group add events only', () => {
    const groups = at5().realm_user_groups as Record<string, unknown>[];
    expect(groups.length).toBeGreaterThan(0);
    for (const g of groups) expect(g.direct_subgroup_ids).toEqual([]);
    const events = { events: eraEvents(122).filter((e) => e.type === 'user_group') };
    const add = events.events.find((e) => e.op === 'add')!;
    expect(add.group).not.toHaveProperty('direct_subgroup_ids');
    const before = structuredClone(events.events.filter((e) => e.op !== 'add'));
    expect(translateAnswer('GET /events', events, answerChangesFor('GET /events', 122, 277))).toBe(true);
    expect((events.events.find((e) => e.op === 'add')!.group as Record<string, unknown>).direct_subgroup_ids).toEqual([]);
    expect(events.events.filter((e) => e.op !== 'add')).toEqual(before);
    expect(answerChangesFor('GET /events', 156, 277).some((c) => c.eventFields.user_group)).toBe(false);
  });

  it('133 and 138: wildcard mention policy 4 → 5, edit limit 0 → null; other values kept', () => {
    const answer: Record<string, unknown> = { realm_wildcard_mention_policy: 4, realm_message_content_edit_limit_seconds: 0 };
    editRegister(answer, 122, 277);
    expect(answer).toEqual({ realm_wildcard_mention_policy: 5, realm_message_content_edit_limit_seconds: null });
    const kept: Record<string, unknown> = { realm_wildcard_mention_policy: 3, realm_message_content_edit_limit_seconds: 600 };
    editRegister(kept, 122, 277);
    expect(kept).toEqual({ realm_wildcard_mention_policy: 3, realm_message_content_edit_limit_seconds: 600 });
    const at6: Record<string, unknown> = { realm_message_content_edit_limit_seconds: 0 };
    editRegister(at6, 156, 277);
    expect(at6.realm_message_content_edit_limit_seconds).toBe(0); // 0 means 0 seconds from 138
  });

  it('134: user_topics built from muted_topics, channel names to ids from the answer; an unknown channel left out', () => {
    const answer: Record<string, unknown> = {
      subscriptions: [{ name: 'general', stream_id: 7 }],
      never_subscribed: [{ name: 'design', stream_id: 9 }],
      muted_topics: [
        ['general', 'lunch', 1_700_000_000],
        ['design', 'logo', 1_700_000_100],
        ['gone', 'old', 1_600_000_000],
      ],
    };
    editRegister(answer, 122, 277);
    expect(answer.user_topics).toEqual([
      { stream_id: 7, topic_name: 'lunch', last_updated: 1_700_000_000, visibility_policy: 1 },
      { stream_id: 9, topic_name: 'logo', last_updated: 1_700_000_100, visibility_policy: 1 },
    ]);
  });

  it('139: a subscription update of in_home_view reaches the app as is_muted, inverted; other updates as they came', () => {
    const events = {
      events: [
        { id: 1, type: 'subscription', op: 'update', stream_id: 7, property: 'in_home_view', value: false },
        { id: 2, type: 'subscription', op: 'update', stream_id: 7, property: 'pin_to_top', value: true },
        { id: 3, type: 'realm', op: 'update', property: 'in_home_view', value: false },
      ],
    };
    const before = structuredClone(events.events.slice(1));
    expect(translateAnswer('GET /events', events, answerChangesFor('GET /events', 122, 277))).toBe(true);
    expect(events.events[0]).toEqual({ id: 1, type: 'subscription', op: 'update', stream_id: 7, property: 'is_muted', value: true });
    expect(events.events.slice(1)).toEqual(before);
    expect(answerChangesFor('GET /events', 156, 277).some((c) => c.upEvent)).toBe(false);
  });

  it('137: realm_enable_read_receipts false below 137', () => {
    expect(registerAdditions(122, 277)).toMatchObject({ realm_enable_read_receipts: false });
    expect(registerAdditions(156, 277)).not.toHaveProperty('realm_enable_read_receipts');
  });

  it('the app’s parsers at every ref find in a 5.0 register so translated only server_emoji_data_url missing (140, not built)', () => {
    for (const ref of ['pinned', 'sweep-2398', 'sweep-2416', 'sweep-2436'] as const) {
      const problems = judgeAt(ref).parseProblems('InitialSnapshot', { ...at5(), zulip_feature_level: 277 });
      expect(problems, ref).toHaveLength(1);
      expect(problems[0], ref).toMatch(/server_emoji_data_url .*: missing/);
    }
  });
});

describe('feature level 224: the wildcard flag renamed in messages and events, @**topic** refused', () => {
  const flagged = () => ({
    result: 'success',
    messages: [
      { id: 1, flags: ['read', 'wildcard_mentioned'] },
      { id: 2, flags: ['read'] },
    ],
    message: { id: 3, flags: ['wildcard_mentioned'] },
    events: [
      { id: 0, type: 'message', flags: ['wildcard_mentioned'], message: { id: 4 } },
      { id: 1, type: 'update_message', flags: ['read', 'wildcard_mentioned'] },
      { id: 2, type: 'update_message_flags', op: 'add', flag: 'read', messages: [4] },
      { id: 3, type: 'constructor', flags: ['wildcard_mentioned'] },
    ],
  });

  it.each([
    [
      'GET /messages',
      'messages',
      [
        { id: 1, flags: ['read', 'stream_wildcard_mentioned'] },
        { id: 2, flags: ['read'] },
      ],
    ],
    ['GET /messages/{id}', 'message', { id: 3, flags: ['stream_wildcard_mentioned'] }],
    [
      'GET /events',
      'events',
      [
        { id: 0, type: 'message', flags: ['stream_wildcard_mentioned'], message: { id: 4 } },
        { id: 1, type: 'update_message', flags: ['read', 'stream_wildcard_mentioned'] },
        { id: 2, type: 'update_message_flags', op: 'add', flag: 'read', messages: [4] },
        { id: 3, type: 'constructor', flags: ['wildcard_mentioned'] },
      ],
    ],
  ] as const)('%s: the declared fields of %s only', (endpoint, key, expected) => {
    const answer = flagged();
    const changes = answerChangesFor(endpoint, 185, 277);
    expect(changes.map((c) => c.marker)).toEqual(['"wildcard_mentioned"']);
    expect(translateAnswer(endpoint, answer, changes)).toBe(true);
    expect(answer[key]).toEqual(expected);
    const untouched = flagged();
    expect(translateAnswer(endpoint, untouched, answerChangesFor(endpoint, 224, 277))).toBe(false);
    expect(untouched).toEqual(flagged());
  });

  it('changes no other endpoint’s answer', () => {
    expect(answerChangesFor('GET /users', 185, 277)).toEqual([]);
    expect(answerChangesFor('POST /messages', 185, 277)).toEqual([]);
  });

  it.each([
    ['@**topic** lunch?', 185, TOPIC_WILDCARD_REFUSAL],
    ['hi @**topic**', 223, TOPIC_WILDCARD_REFUSAL],
    ['hi @**topic**', 224, 'hi @**topic**'],
    ['`@**topic**` is how you write it', 185, '`@**topic**` is how you write it'],
    ['```\n@**topic**\n```', 185, '```\n@**topic**\n```'],
    ['quiet @_**topic**', 185, 'quiet @_**topic**'],
    ['@**topic bot|12** and @**topics**', 185, '@**topic bot|12** and @**topics**'],
  ])('%j to a server at %d → %j', (content, real, expected) => {
    expect(sentAs(content, real)).toBe(expected);
  });
});

describe('feature levels 250 and 271: the app’s narrow links in content', () => {
  it.each([
    ['[#general](#narrow/channel/5-general)', '[#general](#narrow/stream/5-general)'],
    ['[#general > hi](#narrow/channel/5-general/topic/hi)', '[#general > hi](#narrow/stream/5-general/topic/hi)'],
    [
      '@_**Iago|5** [said](https://chat.example.com/#narrow/channel/5-general/topic/hi/near/12):',
      '@_**Iago|5** [said](https://chat.example.com/#narrow/stream/5-general/topic/hi/near/12):',
    ],
    [
      'see https://Chat.Example.com/#narrow/channel/5-general/with/12 now',
      'see https://Chat.Example.com/#narrow/stream/5-general/near/12 now',
    ],
    ['<https://chat.example.com/#narrow/channels/public>', '<https://chat.example.com/#narrow/streams/public>'],
    ['[x](#narrow/-channel/5-general)', '[x](#narrow/-stream/5-general)'],
    // Operands are not operators, whatever they say.
    ['[x](#narrow/channel/5-channel/topic/channel/with/9)', '[x](#narrow/stream/5-channel/topic/channel/near/9)'],
    // Not the realm's, not a link, or in code: as sent.
    ['https://other.example.com/#narrow/channel/5-general', 'https://other.example.com/#narrow/channel/5-general'],
    ['https://chat.example.com.evil.test/#narrow/channel/5-general', 'https://chat.example.com.evil.test/#narrow/channel/5-general'],
    ['xhttps://chat.example.com/#narrow/channel/5', 'xhttps://chat.example.com/#narrow/channel/5'],
    ['type #narrow/channel/5 to search', 'type #narrow/channel/5 to search'],
    ['`[x](#narrow/channel/5-general)`', '`[x](#narrow/channel/5-general)`'],
    // A link's path ends where its prose does: a code span right after it is code.
    ['](#narrow/channel/5`https://chat.example.com/#narrow/channel/`', '](#narrow/stream/5`https://chat.example.com/#narrow/channel/`'],
    ['```\nhttps://chat.example.com/#narrow/channel/5-general\n```', '```\nhttps://chat.example.com/#narrow/channel/5-general\n```'],
  ])('%j → %j', (content, expected) => {
    expect(sentAs(content)).toBe(expected);
  });

  it('leaves links alone for a server that knows them: `channel` from 250, `with` from 271', () => {
    expect(sentAs('[x](#narrow/channel/5-general/with/9)', 250)).toBe('[x](#narrow/channel/5-general/near/9)');
    expect(sentAs('[x](#narrow/channel/5-general/with/9)', 271)).toBe('[x](#narrow/channel/5-general/with/9)');
  });

  it('rewrites links and mentions only, never code, for any text (property)', () => {
    const text = fc
      .array(
        fc.constantFrom(
          'a',
          ' ',
          '\n',
          '`',
          '~',
          '>',
          '(',
          ')',
          '[',
          ']',
          '@**channel**',
          '```',
          '](#narrow/channel/5',
          '/with/9',
          'https://chat.example.com/#narrow/channel/',
          'channel/',
        ),
        { maxLength: 30 },
      )
      .map((parts) => parts.join(''));
    const back = (s: string) =>
      s
        .replaceAll('@**stream**', '@**channel**')
        .replaceAll('/stream/', '/channel/')
        .replaceAll('/streams/', '/channels/')
        .replaceAll('/near/', '/with/');
    fc.assert(
      fc.property(text, (content) => {
        const out = sentAs(content);
        expect(back(out)).toBe(back(content));
        expect(sentAs(out)).toBe(out);
        // Code is code: what lies outside prose stays as sent.
        expect(outsideProse(out)).toBe(outsideProse(content));
      }),
      { numRuns: 2000 },
    );
  });
});

describe('what is not translated', () => {
  it('a content longer than Zulip accepts goes on untouched, for the upstream to deal with', () => {
    const long = `@**channel** ${'x'.repeat(MAX_MESSAGE_LENGTH)}`;
    expect(sentAs(long)).toBe(long);
    expect(sentAs(`@**topic** ${'x'.repeat(MAX_MESSAGE_LENGTH)}`)).toBe(`@**topic** ${'x'.repeat(MAX_MESSAGE_LENGTH)}`);
    const fits = `@**channel** ${'😀'.repeat(MAX_MESSAGE_LENGTH - 13)}`;
    expect([...fits].length).toBe(MAX_MESSAGE_LENGTH);
    expect(sentAs(fits).startsWith('@**stream** ')).toBe(true); // counted in characters, as Zulip counts
  });

  it('a narrow that cannot be read or written again goes on as it came, for the upstream to answer', () => {
    const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
    const form = new FormFields(`narrow=${encodeURIComponent(`[{"operator":"channel","operand":${deep}}]`)}`);
    expect(translateRequest('GET /messages', form, 185, 277).changed).toBe(false);
    expect(form.edited).toBe(false);
  });
});

describe('the app’s mentions in every Markdown shape, on 7.0 and 8.0 (M6)', () => {
  const SEVEN = 185;
  const EIGHT = 237;
  it.each(MARKDOWN_SHAPES)('%s: %j', (_what, content, reading) => {
    const at = content.indexOf('@**channel**');
    const live = `${content.slice(0, at)}@**stream**${content.slice(at + '@**channel**'.length)}`;
    for (const real of [SEVEN, EIGHT]) expect(sentAs(content, real)).toBe(reading === 'prose' ? live : content);
    // The same shape with the topic wildcard: refused on 7.0 where it is live, sent as typed on 8.0.
    const topic = content.replace('@**channel**', '@**topic**');
    expect(sentAs(topic, SEVEN)).toBe(reading === 'prose' ? TOPIC_WILDCARD_REFUSAL : topic);
    expect(sentAs(topic, EIGHT)).toBe(topic);
  });
});

describe('which changes applied: the names client_requests_total counts them by', () => {
  it('a request names the changes that changed it, a refusal the change that refused it, an untouched one none', () => {
    const narrow = new FormFields(`narrow=${encodeURIComponent('[{"operator":"channel","operand":7},{"operator":"dm","operand":[11]}]')}`);
    expect(translateRequest('GET /messages', narrow, 156, 277).applied).toEqual(['narrow_dm_operator', 'narrow_channel_operator']);
    const message = new FormFields('type=channel&to=7&topic=lunch&content=hi+%40**channel**');
    expect(translateRequest('POST /messages', message, 185, 277).applied).toEqual([
      'read_by_sender',
      'type_channel',
      'channel_wildcard_mention',
    ]);
    const refused = translateRequest('POST /messages', new FormFields('type=stream&to=7&topic=t&content=%40**topic**'), 185, 277);
    expect(refused.refusal).toBe(TOPIC_WILDCARD_REFUSAL);
    expect(refused.applied).toEqual(['read_by_sender', 'topic_wildcard_mention']);
    expect(translateRequest('POST /typing', new FormFields('type=direct&to=%5B11%5D&op=start'), 185, 277).applied).toEqual([]);
  });

  it('register edits name the changes that edited, and only those', () => {
    const answer: Record<string, unknown> = { realm_wildcard_mention_policy: 4, realm_message_content_edit_limit_seconds: 600 };
    expect(editRegister(answer, 122, 277)).toEqual(['wildcard_mention_policy_without_stream_admins']);
    expect(editRegister(answer, 122, 277)).toEqual([]); // already in the level's form
  });

  it('answers name the changes that changed them', () => {
    const events = { events: [{ type: 'message', flags: ['wildcard_mentioned'], message: {} }] };
    const applied: string[] = [];
    expect(translateAnswer('GET /events', events, answerChangesFor('GET /events', 185, 277), applied)).toBe(true);
    expect(applied).toEqual(['topic_wildcard_mention']);
  });

  it('added fields name the changes that introduce them; a field of none is left out', () => {
    expect(
      changeIdsOfFields(['role', 'is_owner', 'delivery_email', 'server_presence_ping_interval_seconds', 'ignored_parameters_unsupported']),
    ).toEqual(['user_role', 'user_is_owner', 'user_delivery_email', 'presence_settings']);
    expect(changeIdsOf(CHANGES.flatMap((c) => (c.staticData ? [c.staticData] : [])))).toEqual(['server_emoji_data_url']);
    expect(changeIdsOf([{}])).toEqual([]);
    expect([...CHANGE_IDS]).toEqual(CHANGES.filter((c) => !c.serverBehaviour).map((c) => c.feature));
    expect(CHANGE_IDS.has('invisible_mode')).toBe(false);
  });
});
