import { Readable } from 'node:stream';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { readUpTo } from '../src/http/body.js';

/**
 * The one bounded body reader: the same bytes whether or not a length was declared, and whatever
 * the declared length says (an upstream's Content-Length lets it copy into one buffer as the body
 * arrives, B7); past the limit, what was read and the rest of the stream, intact.
 */

const streamOf = (chunks: Buffer[]) => Readable.from(chunks, { objectMode: false });

describe('readUpTo', () => {
  it('reads the same bytes with any chunking, and any declared length, true or not', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.uint8Array({ maxLength: 50 }), { maxLength: 12 }),
        fc.option(fc.integer({ min: -5, max: 700 }), { nil: undefined }),
        async (parts, declared) => {
          const chunks = parts.map((p) => Buffer.from(p));
          const all = Buffer.concat(chunks);
          const read = await readUpTo(streamOf(chunks), 600, declared);
          expect(read.whole).toBe(true);
          if (read.whole) expect(Buffer.compare(read.body, all)).toBe(0);
        },
      ),
    );
  });

  it.each([
    ['declared as sent', 6],
    ['declared shorter than sent', 2],
    ['declared longer than sent', 40],
    ['not declared', undefined],
  ])('past the limit, %s: what was read and the rest of the stream', async (_what, declared) => {
    const stream = streamOf([Buffer.from('abc'), Buffer.from('def'), Buffer.from('ghi')]);
    const read = await readUpTo(stream, 5, declared);
    expect(read.whole).toBe(false);
    if (read.whole) return;
    expect(Buffer.concat(read.head).toString()).toBe('abcdef');
    expect(read.size).toBe(6);
    const rest: Buffer[] = [];
    for await (const c of read.rest) rest.push(c as Buffer);
    expect(Buffer.concat(rest).toString()).toBe('ghi');
  });
});
