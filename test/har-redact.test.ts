import { describe, expect, it } from 'vitest';
import { matchOf } from '../src/har/match.js';
import { Redactor } from '../src/har/redact.js';

/**
 * What a HAR file may keep (H1, P13): the Redactor removes every credential spelling from
 * requests, answers and bodies; replay matching (H2) finds a recorded answer for the request a
 * client sends again.
 */

const KEY = 'aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI';
const basic = (email: string, key: string) => `Basic ${Buffer.from(`${email}:${key}`).toString('base64')}`;

describe('Redactor (H1, P13)', () => {
  it('gives the same secret the same placeholder and different secrets different ones', () => {
    const r = new Redactor();
    const a = r.header('Authorization', basic('a@example.com', KEY));
    const b = r.header('authorization', basic('b@example.com', 'another-key-0123456789'));
    expect(a).toMatch(/^Basic \[redacted-\d+\]$/);
    expect(b).toMatch(/^Basic \[redacted-\d+\]$/);
    expect(a).not.toBe(b);
    expect(r.header('Authorization', basic('a@example.com', KEY))).toBe(a);
    expect(r.header('Authorization', 'Bearer tok')).toMatch(/^Bearer \[redacted-\d+\]$/);
  });

  it('keeps cookie names and Set-Cookie attributes, replaces the values', () => {
    const r = new Redactor();
    const cookie = r.header('Cookie', `sessionid=${KEY}; csrftoken=abc`);
    expect(cookie).toMatch(/^sessionid=\[redacted-\d+\]; csrftoken=\[redacted-\d+\]$/);
    const set = r.header('Set-Cookie', `sessionid=${KEY}; Path=/; HttpOnly; SameSite=Lax`);
    expect(set).toBe(`sessionid=${cookie.split(';')[0]!.split('=')[1]}; Path=/; HttpOnly; SameSite=Lax`);
    expect(r.header('X-CSRFToken', 'abc')).toBe(cookie.split('csrftoken=')[1]);
    expect(r.header('Content-Type', 'text/plain')).toBe('text/plain');
  });

  it('replaces api_key, password and token in query strings and forms, any length, and keeps the rest as written', () => {
    const r = new Redactor();
    const q = r.form('api_key=k1&a=%2Fx&password=p%26w&new_password=&token=t');
    expect(q).toMatch(/^api_key=%5Bredacted-1%5D&a=%2Fx&password=%5Bredacted-2%5D&new_password=&token=%5Bredacted-3%5D$/);
    // The decoded value is the secret: a JSON "p&w" gets the same placeholder.
    expect(r.json('{"password":"p&w"}')).toBe('{"password":"[redacted-2]"}');
    expect(
      r.pairs([
        { name: 'API_KEY', value: 'k1' },
        { name: 'x', value: 'k1' },
      ]),
    ).toEqual([
      { name: 'API_KEY', value: '[redacted-1]' },
      { name: 'x', value: 'k1' },
    ]);
  });

  it('replaces secret JSON keys at any depth and keeps the formatting', () => {
    const r = new Redactor();
    const text = '{\n  "result": "success",\n  "api_key" : "short",\n  "nested": [{"password": "pw"}]\n}';
    expect(r.json(text)).toBe('{\n  "result": "success",\n  "api_key" : "[redacted-1]",\n  "nested": [{"password": "[redacted-2]"}]\n}');
    // An unusual escape (\u0041 for A) cannot be found as written: re-serialised instead.
    const odd = r.json('{"api_key":"\\u0041BC"}');
    expect(JSON.parse(odd)).toEqual({ api_key: '[redacted-3]' });
    expect(r.json('not json')).toBe('not json');
  });

  it('replaces secret multipart fields', () => {
    const r = new Redactor();
    const body =
      '--b\r\nContent-Disposition: form-data; name="password"\r\n\r\npw1\r\n--b\r\nContent-Disposition: form-data; name="user"\r\n\r\npw1\r\n--b--\r\n';
    const expected =
      '--b\r\nContent-Disposition: form-data; name="password"\r\n\r\n[redacted-1]\r\n--b\r\nContent-Disposition: form-data; name="user"\r\n\r\npw1\r\n--b--\r\n';
    expect(
      r.multipart(body, [
        ['password', 'pw1'],
        ['user', 'pw1'],
      ]),
    ).toBe(expected);
  });

  it('finds long secrets anywhere, in every spelling; short ones only where they belong', () => {
    const r = new Redactor();
    const p = r.placeholder('Tr0ub4dor&3 horse');
    r.placeholder('short');
    for (const spelled of [
      'Tr0ub4dor&3 horse',
      'Tr0ub4dor%263%20horse',
      'Tr0ub4dor%263+horse',
      Buffer.from('Tr0ub4dor&3 horse').toString('base64'),
    ]) {
      expect(r.scrub(`x${spelled}y`)).toBe(`x${p}y`);
    }
    expect(r.scrub('a short text')).toBe('a short text');
    const g = r.generation;
    r.placeholder('another-long-secret');
    expect(r.generation).toBe(g + 1);
  });

  it('scrubs a base64 body as bytes and keeps URLs valid', () => {
    const r = new Redactor();
    const p = r.placeholder(KEY);
    const entry = {
      request: { url: `https://x.example/a?k=${KEY}` },
      content: { text: Buffer.from(`\x00\xff${KEY}\x01`, 'latin1').toString('base64'), encoding: 'base64' },
    };
    const out = r.scrubDeep(entry);
    expect(out.request.url).toBe(`https://x.example/a?k=${encodeURIComponent(p)}`);
    expect(Buffer.from(out.content.text, 'base64').toString('latin1')).toBe(`\x00\xff${p}\x01`);
  });
});

describe('replay matching (H2)', () => {
  const form = 'application/x-www-form-urlencoded';
  const key = async (method: string, url: string, contentType?: string, body = '') =>
    (await matchOf({ method, url, contentType, body: Buffer.from(body) })).key;

  it('finds a secret inside a larger base64 blob at any byte offset', () => {
    for (const offset of [0, 1, 2, 3, 4, 5]) {
      for (const after of ['', 'x', 'xy', 'xyz']) {
        const r = new Redactor();
        r.placeholder(KEY);
        // A header value such as `Basic base64(email:key)`, or a base64 body echoed in a text.
        const blob = Buffer.from(`${'p'.repeat(offset)}${KEY}${after}`).toString('base64');
        const scrubbed = r.scrub(`{"echo":"${blob}"}`);
        const what = `offset ${offset}, ${after.length} bytes after`;
        expect(scrubbed, what).toMatch(/\[redacted-1\]/);
        // No run of the secret survives in the decoded bytes around the placeholder.
        const leftover = scrubbed.match(/"echo":"(.*)"/)![1]!.split('[redacted-1]');
        for (const piece of leftover) expect(Buffer.from(piece, 'base64').toString('latin1'), what).not.toContain(KEY.slice(0, 4));
      }
    }
  });

  it('ignores host, query order and form parameter order', async () => {
    expect(await key('get', 'https://a.example/api/v1/x?b=2&a=1')).toBe(await key('GET', '/api/v1/x?a=1&b=2'));
    expect(await key('POST', '/p', form, 'status=active&last_update_id=5')).toBe(
      await key('POST', '/p', `${form}; charset=UTF-8`, 'last_update_id=5&status=active'),
    );
    expect(await key('POST', '/p', form, 'last_update_id=5&status=active')).not.toBe(
      await key('POST', '/p', form, 'last_update_id=6&status=active'),
    );
    expect(await key('POST', '/p', form, 'a=1&a=2')).not.toBe(await key('POST', '/p', form, 'a=1'));
  });

  it('compares multipart bodies as parameter sets, whatever the boundary', async () => {
    const mp = (b: string, order: Array<[string, string]>) =>
      `${order.map(([k, v]) => `--${b}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`).join('')}--${b}--\r\n`;
    const one = await key(
      'POST',
      '/p',
      'multipart/form-data; boundary=xx1',
      mp('xx1', [
        ['status', 'active'],
        ['ping_only', 'true'],
      ]),
    );
    const two = await key(
      'POST',
      '/p',
      'multipart/form-data; boundary=yy22',
      mp('yy22', [
        ['ping_only', 'true'],
        ['status', 'active'],
      ]),
    );
    expect(one).toBe(two);
    expect(one).not.toBe(
      await key(
        'POST',
        '/p',
        'multipart/form-data; boundary=xx1',
        mp('xx1', [
          ['status', 'idle'],
          ['ping_only', 'true'],
        ]),
      ),
    );
  });

  it('compares JSON as canonical JSON and other bodies byte for byte', async () => {
    const json = 'application/json';
    expect(await key('POST', '/j', json, '{"a":1,"b":[1,2]}')).toBe(await key('POST', '/j', json, '{ "b": [1, 2], "a": 1 }'));
    expect(await key('POST', '/j', json, '{"b":[2,1],"a":1}')).not.toBe(await key('POST', '/j', json, '{"a":1,"b":[1,2]}'));
    expect(await key('PUT', '/o', 'application/octet-stream', 'abc')).not.toBe(await key('PUT', '/o', 'application/octet-stream', 'abd'));
  });

  it('matches a credential parameter whatever it holds: recordings keep placeholders', async () => {
    expect(await key('POST', '/api/v1/fetch_api_key', form, 'username=u&password=%5Bredacted-1%5D')).toBe(
      await key('POST', '/api/v1/fetch_api_key', form, 'password=real-secret&username=u'),
    );
    expect(await key('GET', '/x?api_key=[redacted-2]')).toBe(await key('GET', '/x?api_key=abc'));
  });

  it('names the request without its credentials', async () => {
    const m = await matchOf({
      method: 'POST',
      url: '/p?api_key=secret1&b=2',
      contentType: form,
      body: Buffer.from('password=secret2&status=idle'),
    });
    expect(m.describe).toBe('POST /p?api_key=[redacted]&b=2 with form body password=[redacted]&status=idle');
    expect(m.describe).not.toMatch(/secret/);
  });
});

describe('a client spraying secrets (X2, X8)', () => {
  it('keeps what the redactor remembers bounded, and still redacts every new secret at once', () => {
    const r = new Redactor();
    const first = r.placeholder('sprayed-secret-00000');
    expect(r.placeholder('sprayed-secret-00000')).toBe(first); // stable while recent
    for (let i = 1; i <= 20_000; i++) {
      const secret = `sprayed-secret-${String(i).padStart(5, '0')}`;
      const p = r.placeholder(secret);
      // The textual layer knows the newest one: an echo of it anywhere is replaced.
      if (i % 5_000 === 0) expect(r.scrub(`echo ${secret} echo`)).toBe(`echo ${p} echo`);
    }
    const internals = r as unknown as { placeholders: { size: number }; textual: { size: number } };
    expect(internals.placeholders.size).toBeLessThanOrEqual(10_000);
    expect(internals.textual.size).toBeLessThanOrEqual(64);
    // Long gone: a new placeholder, never another secret's.
    expect(r.placeholder('sprayed-secret-00000')).not.toBe(first);
  });
});
