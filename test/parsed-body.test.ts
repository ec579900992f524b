import { describe, expect, it } from 'vitest';
import { bytesOfParsedBody, formOf } from '../src/http/parsed-body.js';

/**
 * What a body parser left in `req.body`, back to the bytes it came as (http/parsed-body.ts), as
 * the Express middleware sends it on after `express.json()` / `express.urlencoded()`.
 */

describe('formOf', () => {
  it.each([
    [{ status: 'active', last_update_id: '-1' }, 'status=active&last_update_id=-1'],
    // extended: false reads a repeated name as an array of strings
    [{ to: ['1', '2'] }, 'to=1&to=2'],
    // qs (extended: true) nests names in brackets
    [{ a: { b: '1', c: ['x', 'y'] } }, 'a%5Bb%5D=1&a%5Bc%5D%5B%5D=x&a%5Bc%5D%5B%5D=y'],
    [{ a: [{ b: '1' }] }, 'a%5B0%5D%5Bb%5D=1'],
    [{ topic: 'café & tea', content: 'a+b=c' }, 'topic=caf%C3%A9%20%26%20tea&content=a%2Bb%3Dc'],
    [{}, ''],
  ])('%j → %s', (fields, form) => {
    expect(formOf(fields)).toBe(form);
    // What a form parser reads back is what was given (flat cases).
    if (Object.values(fields).every((v) => typeof v === 'string')) {
      expect(Object.fromEntries(new URLSearchParams(form))).toEqual(fields);
    }
  });

  it.each([[{ n: 1 }], [{ ok: true }], [{ nothing: null }], [{ list: [1] }]])(
    '%j cannot be rebuilt (no form parser makes it)',
    (fields) => {
      expect(formOf(fields)).toBeUndefined();
    },
  );
});

describe('bytesOfParsedBody', () => {
  it('JSON as JSON, for application/json and +json types', () => {
    expect(bytesOfParsedBody({ a: [1, 'é'] }, 'application/json; charset=utf-8')?.toString()).toBe('{"a":[1,"é"]}');
    expect(bytesOfParsedBody([1], 'application/vnd.api+json')?.toString()).toBe('[1]');
  });

  it('a form as a form, a Buffer as it is, UTF-8 text as it is', () => {
    expect(bytesOfParsedBody({ status: 'idle' }, 'application/x-www-form-urlencoded')?.toString()).toBe('status=idle');
    const raw = Buffer.from([0, 1, 2, 255]);
    expect(bytesOfParsedBody(raw, 'application/octet-stream')).toBe(raw);
    expect(bytesOfParsedBody('héllo', 'text/plain; charset=utf-8')?.toString()).toBe('héllo');
  });

  it('cannot rebuild multipart, another charset, or a body no parser of that type makes', () => {
    expect(bytesOfParsedBody({ status: 'idle' }, 'multipart/form-data; boundary=x')).toBeUndefined();
    expect(bytesOfParsedBody('héllo', 'text/plain; charset=latin1')).toBeUndefined();
    expect(bytesOfParsedBody('status=idle', 'application/x-www-form-urlencoded')).toBeUndefined();
    expect(bytesOfParsedBody(undefined, 'application/json')).toBeUndefined();
    expect(bytesOfParsedBody({}, undefined)).toBeUndefined();
  });
});
