import { gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { budgetedLru, bytesOf, type Footprint } from '../src/cache/budgeted.js';
import { MIN_GZIP_BYTES } from '../src/http/compress.js';
import { bodyFootprint } from '../src/presence/snapshots.js';

/**
 * X2: every bounded cache sizes its entries through one rule (src/cache/budgeted.ts): a fixed
 * part, strings at two bytes a character, byte arrays at their length, items at a measured cost.
 */

describe('bytesOf', () => {
  it.each<[string, Footprint, number]>([
    ['a fixed part alone', { fixed: 256 }, 256],
    ['never 0: lru-cache wants a positive size', { fixed: 0 }, 1],
    ['a whole number, rounded up', { fixed: 64, later: 0.5 }, 65],
    ['strings at two bytes a character, absent ones at none', { fixed: 200, strings: ['ab', undefined, 'é'] }, 206],
    ['a character outside the BMP is two UTF-16 units', { fixed: 0, strings: ['😀'] }, 4],
    ['one-byte strings (no character past U+00FF) at one byte a character', { fixed: 0, oneByteStrings: ['ab', undefined, 'é'] }, 3],
    ['buffers and typed arrays at their byteLength', { fixed: 0, bytes: [Buffer.alloc(10), new Int32Array(10), undefined] }, 50],
    ['items at their measured cost (a ledger of 100 users)', { fixed: 1024, items: 100, bytesPerItem: 160 }, 17_024],
    ['no items', { fixed: 1024, items: undefined, bytesPerItem: 120 }, 1024],
    ['room taken later (an answer body and its gzip)', { fixed: 64, bytes: [Buffer.alloc(2000)], later: 1000 }, 3064],
    [
      'values inside with their own footprint (a decoded Redis ledger)',
      { fixed: 256, bytes: [Buffer.alloc(48)], inner: [{ fixed: 1024, items: 10, bytesPerItem: 160 }, undefined] },
      256 + 48 + 1024 + 1600,
    ],
  ])('%s', (_what, footprint, bytes) => {
    expect(bytesOf(footprint)).toBe(bytes);
  });

  const footprint: fc.Arbitrary<Footprint> = fc.record(
    {
      fixed: fc.integer({ min: 0, max: 4096 }),
      strings: fc.array(fc.option(fc.string({ unit: 'binary' }), { nil: undefined }), { maxLength: 4 }),
      bytes: fc.array(fc.option(fc.uint8Array({ maxLength: 64 }), { nil: undefined }), { maxLength: 3 }),
      items: fc.option(fc.nat(10_000), { nil: undefined }),
      bytesPerItem: fc.integer({ min: 0, max: 200 }),
      // As the cached answers give it (half their raw bytes): whole and half bytes, which add up exactly.
      later: fc.nat(2_000_000).map((n) => n / 2),
    },
    { requiredKeys: ['fixed'] },
  );

  it('is a whole number, never below the fixed part, the UTF-16 text (how V8 keeps a string at most), the bytes and the items', () => {
    fc.assert(
      fc.property(footprint, (f) => {
        const n = bytesOf(f);
        expect(Number.isInteger(n) && n >= 1).toBe(true);
        const text = (f.strings ?? []).reduce((sum, s) => sum + (s === undefined ? 0 : Buffer.byteLength(s, 'utf16le')), 0);
        const bytes = (f.bytes ?? []).reduce((sum, b) => sum + (b?.byteLength ?? 0), 0);
        expect(n).toBeGreaterThanOrEqual(f.fixed + text + bytes + (f.items ?? 0) * (f.bytesPerItem ?? 0) + (f.later ?? 0));
      }),
    );
  });

  it('grows with whatever is added, and a footprint inside another counts as much as beside it', () => {
    fc.assert(
      fc.property(footprint, footprint, (a, b) => {
        expect(bytesOf({ ...a, inner: [b] })).toBeGreaterThanOrEqual(bytesOf(a));
        expect(bytesOf({ ...a, inner: [b] })).toBeLessThanOrEqual(bytesOf(a) + bytesOf(b));
        // Two bytes a character (above the floor of 1 an empty footprint is given).
        const withText = (text: string) => bytesOf({ ...a, strings: [...(a.strings ?? []), text] });
        expect(withText('xy') - withText('x')).toBe(2);
      }),
      { examples: [[{ fixed: 0 }, { fixed: 0 }]] }, // empty: the floor of 1 byte
    );
  });
});

describe('budgetedLru', () => {
  it('keeps entries within maxBytes by their footprints, least recently used out first; one larger than the budget is not kept', () => {
    const cache = budgetedLru<string, string>(3 * 1000, (v) => ({ fixed: 0, strings: [v] }));
    for (const k of ['a', 'b', 'c', 'd']) cache.set(k, k.repeat(500));
    expect([...cache.keys()].sort()).toEqual(['b', 'c', 'd']);
    expect(cache.calculatedSize).toBe(3000);
    cache.set('big', 'x'.repeat(1501));
    expect(cache.has('big')).toBe(false);
  });
});

describe('answer bodies (the answers budget)', () => {
  const presences = fc.dictionary(
    fc.integer({ min: 1, max: 10_000_000 }).map(String),
    fc.record({ active_timestamp: fc.integer({ min: 0, max: 2 ** 31 }), idle_timestamp: fc.integer({ min: 0, max: 2 ** 31 }) }),
    { maxKeys: 400, size: 'max' },
  );

  it('a presence answer is charged at least its bytes and the gzip it gets when first sent', () => {
    fc.assert(
      fc.property(presences, fc.integer({ min: 1, max: 2 ** 31 }), (p, id) => {
        const raw = Buffer.from(
          JSON.stringify({ result: 'success', msg: '', server_timestamp: 1_763_700_000.5, presences: p, presence_last_update_id: id }),
        );
        const gzipped = raw.length >= MIN_GZIP_BYTES ? gzipSync(raw, { level: 6 }).length : 0;
        expect(bytesOf(bodyFootprint({ raw }))).toBeGreaterThanOrEqual(raw.length + gzipped);
      }),
      { numRuns: 200 },
    );
  });
});
