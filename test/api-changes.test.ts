import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { channelWildcardAsStream } from '../src/changes/fl247-channel-wildcard.js';
import { CHANGES, checkedBundle, endpointKey, TRANSLATED_ENDPOINTS, USER_CHANGES } from '../src/changes/index.js';
import { editOutsideCode } from '../src/changes/markdown-text.js';

/**
 * U2, V1, M2: one registry of API changes, both directions. Each change is one module naming its
 * feature level; user-object parts fill every caller's user objects, request parts put the
 * mobile app's requests into an older upstream's form.
 */

describe('the one registry', () => {
  it('holds the user-object and the request changes in feature-level order', () => {
    // (The notification changes, M7, are test/push-changes.test.ts's.)
    expect(CHANGES.filter((c) => !c.notification).map((c) => [c.featureLevel, c.user ? 'user' : 'request'])).toEqual([
      [1, 'user'],
      [8, 'user'],
      [10, 'user'],
      [59, 'user'],
      [73, 'user'],
      [83, 'user'],
      [163, 'user'],
      [215, 'request'],
      [236, 'request'],
      [247, 'request'],
      [248, 'request'],
      [250, 'request'],
      [271, 'request'],
    ]);
    expect(USER_CHANGES).toHaveLength(7);
  });

  it('refuses a change that changes nothing', () => {
    expect(() => checkedBundle([{ featureLevel: 3, feature: 'nothing' }])).toThrow('nothing changes nothing');
  });

  it('names endpoints with a path segment of digits as {id}', () => {
    expect(endpointKey('PATCH', '/messages/123')).toBe('PATCH /messages/{id}');
    expect(endpointKey('GET', '/messages')).toBe('GET /messages');
    expect(endpointKey('GET', '/users/me/12/topics')).toBe('GET /users/me/{id}/topics');
    expect([...TRANSLATED_ENDPOINTS].sort()).toEqual([
      'GET /messages',
      'PATCH /messages/{id}',
      'POST /messages',
      'POST /messages/flags/narrow',
      'POST /typing',
    ]);
  });
});

describe('feature level 247: @**channel** as @**stream**, outside code', () => {
  it.each([
    ['@**channel** lunch!', '@**stream** lunch!'],
    ['quiet @_**channel**', 'quiet @_**stream**'],
    ['@**channel** and @**channel**', '@**stream** and @**stream**'],
    ['@**all** @**topic** @**Channel Bot|12**', '@**all** @**topic** @**Channel Bot|12**'],
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
    expect(channelWildcardAsStream(content)).toBe(expected);
  });

  it('changes nothing but the mentions: code, and any text without one, stay as sent', () => {
    const text = fc
      .array(fc.constantFrom('a', ' ', '\n', '`', '~', '>', '@', '*', '_', 'channel', '```', '~~~', '@**channel**'), { maxLength: 40 })
      .map((parts) => parts.join(''));
    fc.assert(
      fc.property(text, (content) => {
        expect(editOutsideCode(content, (s) => s)).toBe(content);
        const out = channelWildcardAsStream(content);
        expect(out.replaceAll('@**stream**', '@**channel**').replaceAll('@_**stream**', '@_**channel**')).toBe(
          content.replaceAll('@**stream**', '@**channel**').replaceAll('@_**stream**', '@_**channel**'),
        );
        expect(channelWildcardAsStream(out)).toBe(out);
      }),
    );
  });
});
