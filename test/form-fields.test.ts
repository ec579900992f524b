import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeWithOffsets, encodeFormPart, FormFields } from '../src/http/form-fields.js';

/**
 * M2: a translated request changes only the bytes a change rewrites; every other parameter, and
 * the order and repetition of all of them, reach the upstream as the client sent them.
 */

const mentions = (text: string) => [...text.matchAll(/channel/g)].map((m) => ({ start: m.index, end: m.index + 7, text: 'stream' }));

describe('a form edited in place', () => {
  it.each([
    // Spaces as %20 or +, backticks and stars as sent, the other parameters byte for byte.
    ['a=%20x&content=%40**channel**+%60y%60&b=1', 'a=%20x&content=%40**stream**+%60y%60&b=1'],
    ['content=@**channel**%20`x`', 'content=@**stream**%20`x`'],
    // Repeated: the value the server reads (Django's last) translated in its place, none merged.
    ['content=%40**channel**&content=second', 'content=%40**channel**&content=second'],
    ['content=first&content=%40**channel**&b=2', 'content=first&content=%40**stream**&b=2'],
    ['content=caf%C3%A9+%40**channel**+%F0%9F%98%80', 'content=caf%C3%A9+%40**stream**+%F0%9F%98%80'],
    ['content=caf\u00e9 @**channel**', 'content=caf\u00e9 @**stream**'],
    // Not UTF-8: left for the upstream to read as it would.
    ['content=%FF+%40**channel**', 'content=%FF+%40**channel**'],
    ['content', 'content'],
    ['', ''],
  ])('%j → %j', (raw, expected) => {
    const form = new FormFields(raw);
    form.editText('content', mentions);
    expect(form.toString()).toBe(expected);
    expect(form.edited).toBe(raw !== expected);
  });

  it('reads as Django does: the last value', () => {
    const form = new FormFields('content=first&content=second&x');
    expect(form.get('content')).toBe('second');
    expect(form.get('x')).toBe('');
    expect(form.get('y')).toBeNull();
    expect(form.has('x')).toBe(true);
  });

  it('deletes and appends without touching the rest', () => {
    const form = new FormFields('type=channel&stream_id=7&topic=a%20b');
    form.edit('type', (t) => (t === 'channel' ? 'stream' : t));
    form.delete('stream_id');
    form.append('to', '[7]');
    expect(form.toString()).toBe('type=stream&topic=a%20b&to=%5B7%5D');
    expect(form.has('stream_id')).toBe(false);
  });

  it('maps every decoded character back to its bytes (property)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 30 }), fc.boolean(), (text, plus) => {
        const raw = plus ? encodeFormPart(text) : encodeURIComponent(text);
        const decoded = decodeWithOffsets(raw)!;
        expect(decoded.text).toBe(text);
        for (let i = 0; i < text.length; ) {
          const cp = text.codePointAt(i)!;
          const width = cp > 0xffff ? 2 : 1;
          const bytes = raw.slice(decoded.rawAt[i], decoded.rawAt[i + width]);
          expect(new URLSearchParams(`a=${bytes}`).get('a')).toBe(String.fromCodePoint(cp));
          i += width;
        }
      }),
    );
  });

  it('an edit anywhere leaves the rest of the value byte for byte (property)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 20 }), fc.string({ unit: 'grapheme', maxLength: 20 }), (before, after) => {
        const raw = `content=${encodeURIComponent(before)}channel${encodeURIComponent(after)}&z=%20`;
        const form = new FormFields(raw);
        form.editText('content', (t) => {
          const at = t.indexOf('channel', before.length);
          return [{ start: at, end: at + 7, text: 'stream' }];
        });
        expect(form.toString()).toBe(`content=${encodeURIComponent(before)}stream${encodeURIComponent(after)}&z=%20`);
        expect(form.get('content')).toBe(`${before}stream${after}`);
      }),
    );
  });
});
