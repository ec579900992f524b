import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CHUNK_BYTES, LineChunks } from '../src/observability/logger.js';

/**
 * The stdout writer's chunks (observability/logger.ts): lines encoded straight into 16 KB
 * chunks must come out as the lines' own UTF-8, in order, whatever their characters and length.
 */

function collect(): { chunks: Buffer[]; lines: LineChunks } {
  const chunks: Buffer[] = [];
  return { chunks, lines: new LineChunks({ write: (b) => chunks.push(Buffer.from(b)) }) };
}

describe('LineChunks', () => {
  it.each([
    ['ASCII', ['{"a":1}\n', '{"b":2}\n']],
    ['two- and three-byte characters', ['é€\n', 'Ωπ\n']],
    ['astral characters (surrogate pairs)', ['😀🎉\n']],
    ['a lone surrogate, as JSON.stringify may leave one', ['\ud800x\n']],
    ['a line longer than a chunk', ['y'.repeat(CHUNK_BYTES * 2), 'short\n']],
    ['a line of exactly a third of a chunk', ['z'.repeat(CHUNK_BYTES / 3 - 1), '\n']],
    ['three-byte characters where a chunk ends', ['a'.repeat(CHUNK_BYTES - 10), '€'.repeat(8), '\n']],
  ])('%s: the bytes are the lines’ own UTF-8, in order', (_name, input) => {
    const { chunks, lines } = collect();
    for (const line of input) lines.write(line);
    lines.handOver();
    expect(Buffer.concat(chunks).equals(Buffer.from(input.join('')))).toBe(true);
  });

  it('any lines: the same bytes as Buffer.from of them all; no chunk over 16 KB but a single long line', () => {
    const line = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 3_000 }),
      fc.string({ unit: 'grapheme', maxLength: 2_000 }),
      fc.string({ maxLength: 20_000 }),
    );
    fc.assert(
      fc.property(fc.array(line, { maxLength: 60 }), fc.array(fc.nat(60), { maxLength: 5 }), (input, handOvers) => {
        const { chunks, lines } = collect();
        input.forEach((l, i) => {
          lines.write(l);
          if (handOvers.includes(i)) lines.handOver();
        });
        lines.handOver();
        expect(Buffer.concat(chunks).equals(Buffer.from(input.join('')))).toBe(true);
        const long = new Set(input.filter((l) => l.length * 3 > CHUNK_BYTES).map((l) => Buffer.byteLength(l)));
        for (const c of chunks) if (c.length > CHUNK_BYTES) expect(long.has(c.length)).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it('hands over nothing when it holds nothing', () => {
    const { chunks, lines } = collect();
    lines.handOver();
    lines.write('');
    lines.handOver();
    expect(chunks).toEqual([]);
  });
});
