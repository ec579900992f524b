import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { editOutsideCode, proseRanges, scanSteps } from '../src/changes/markdown-text.js';
import { MARKDOWN_SHAPES } from './support/markdown-shapes.js';

/**
 * M6: changes/markdown-text.ts reads a message the way a Zulip server's Markdown does, to rewrite
 * the app's `@**channel**` (and links) only where the server reads text. Each row's reading was
 * checked against Zulip's own pipeline (fenced_code.py, its block processors and BACKTICK_RE on
 * Python-Markdown 3.x): `prose` where the server renders the mention (inside a quote block, a
 * silent one, still rewritten), `code` where it shows it as code, or not at all.
 */

const MENTION = '@**channel**';
const asStream = (text: string) => text.replaceAll(MENTION, '@**stream**');
const inProse = (content: string, at: number) => proseRanges(content).some(([start, end]) => start <= at && at + MENTION.length <= end);

describe('where Zulip reads @**channel** as text', () => {
  it.each(MARKDOWN_SHAPES)('%s: %j is %s', (_, content, reading) => {
    const at = content.indexOf(MENTION);
    expect(inProse(content, at)).toBe(reading === 'prose');
    const rewritten = `${content.slice(0, at)}@**stream**${content.slice(at + MENTION.length)}`;
    expect(editOutsideCode(content, asStream)).toBe(reading === 'prose' ? rewritten : content);
  });

  it('gives ranges of the content as sent: fence lines are code, CR LF and tabs keep their offsets', () => {
    expect(proseRanges('')).toEqual([]);
    expect(proseRanges('no code here')).toEqual([[0, 12]]);
    expect(proseRanges('a `b` c')).toEqual([
      [0, 2],
      [5, 7],
    ]);
    expect(proseRanges('x\n```\ny\n```\nz')).toEqual([
      [0, 2],
      [11, 13],
    ]);
    expect(proseRanges('```spoiler Lunch\nx\n```')).toEqual([[11, 19]]);
    // The tab makes 4 columns, but inside a paragraph: text.
    expect(proseRanges('a\r\n\t`b` c\r\n    d')).toEqual([
      [0, 4],
      [7, 16],
    ]);
    expect(proseRanges('a\r\n\r\n\t`b` c')).toEqual([[0, 5]]);
  });
});

describe('any text (property)', () => {
  const text = fc
    .array(
      fc.constantFrom(
        '`',
        '`',
        '``',
        '```',
        '~',
        '~~~',
        '\\',
        '\n',
        '\n',
        ' ',
        '    ',
        '\t',
        '\r\n',
        MENTION,
        'quote',
        'spoiler',
        '-',
        '* ',
        '1. ',
        '> ',
        '#',
        'a',
      ),
      { maxLength: 40 },
    )
    .map((parts) => parts.join(''));

  it('gives ranges in order, apart, not empty, within the content', () => {
    fc.assert(
      fc.property(text, (content) => {
        let end = -1;
        for (const [start, stop] of proseRanges(content)) {
          expect(start).toBeGreaterThan(end);
          expect(stop).toBeGreaterThan(start);
          expect(stop).toBeLessThanOrEqual(content.length);
          end = stop;
        }
      }),
    );
  });

  it('edits nothing with the identity, and hands the edit the prose stretches only', () => {
    fc.assert(
      fc.property(text, (content) => {
        expect(editOutsideCode(content, (s) => s)).toBe(content);
        const handed: string[] = [];
        editOutsideCode(content, (s) => {
          handed.push(s);
          return '';
        });
        expect(handed).toEqual(proseRanges(content).map(([start, end]) => content.slice(start, end)));
      }),
    );
  });

  it('keeps what lies outside prose as it was when the mentions are rewritten, and reads the result the same way', () => {
    const code = (s: string) => {
      let kept = '';
      let from = 0;
      for (const [start, end] of proseRanges(s)) {
        kept += `${s.slice(from, start)}|`;
        from = end;
      }
      return kept + s.slice(from);
    };
    fc.assert(
      fc.property(text, (content) => {
        const out = editOutsideCode(content, asStream);
        expect(code(out)).toBe(code(content));
        expect(out.replaceAll('@**stream**', MENTION)).toBe(content.replaceAll('@**stream**', MENTION));
      }),
    );
  });
});

describe('code spans, against Python-Markdown’s own pattern (property)', () => {
  /** Python-Markdown 3.x's BACKTICK_RE (compiled with re.DOTALL), which JavaScript reads the same way. */
  const BACKTICK_RE = /(?:(?<!\\)((?:\\{2})+)(?=`+)|(?<!\\)(`+)(.+?)(?<!`)\2(?!`))/gs;
  /**
   * The code spans of one paragraph as the InlineProcessor finds them: each match is stashed
   * (here: blanked, so a backtick after stashed backslashes is no longer after one), the search
   * goes on after it. The pattern backtracks, so keep paragraphs short.
   */
  const regexSpans = (paragraph: string, offset: number): Array<[number, number]> => {
    const spans: Array<[number, number]> = [];
    let work = paragraph;
    BACKTICK_RE.lastIndex = 0;
    for (let m = BACKTICK_RE.exec(work); m; m = BACKTICK_RE.exec(work)) {
      const end = m.index + m[0].length;
      if (m[2]) spans.push([offset + m.index, offset + end]);
      work = work.slice(0, m.index) + ' '.repeat(m[0].length) + work.slice(end);
      BACKTICK_RE.lastIndex = end;
    }
    return spans;
  };
  // Lines that start with a letter: no fence, list, quote, heading or indented code, only paragraphs.
  const line = fc
    .array(fc.constantFrom('`', '`', '``', '```', '\\', '\\', ' ', 'a', MENTION), { maxLength: 12 })
    .map((p) => `a${p.join('')}`);
  const paragraph = fc.array(line, { minLength: 1, maxLength: 3 }).map((lines) => lines.join('\n'));
  const message = fc.array(paragraph, { minLength: 1, maxLength: 3 }).map((paragraphs) => paragraphs.join('\n\n'));

  it('finds the spans BACKTICK_RE finds in each paragraph, and nothing else', () => {
    fc.assert(
      fc.property(message, (content) => {
        const spans: Array<[number, number]> = [];
        let offset = 0;
        for (const p of content.split('\n\n')) {
          spans.push(...regexSpans(p, offset));
          offset += p.length + 2;
        }
        const ranges = proseRanges(content);
        const code = (i: number) => spans.some(([start, end]) => start <= i && i < end);
        const prose = (i: number) => ranges.some(([start, end]) => start <= i && i < end);
        for (let i = 0; i < content.length; i++) expect([i, prose(i)]).toEqual([i, !code(i)]);
      }),
      { numRuns: 1000 },
    );
  });
});

describe('linear in the content’s length (counted steps, not a timer)', () => {
  const MB = 1 << 20;
  const fill = (unit: string) => (size: number) => unit.repeat(Math.ceil(size / unit.length)).slice(0, size);
  /** Backtick runs of n, n-1, … 1, each after a letter: every run an opener looking for its closer. */
  const decreasing = (n: number) => (size: number) => {
    let cycle = '';
    for (let k = n; k >= 1; k--) cycle += `${'`'.repeat(k)}a`;
    return fill(cycle)(size);
  };
  it.each<[string, (size: number) => string]>([
    ['backtick runs of 1000 … 1', decreasing(1000)],
    ['backtick runs of 100 … 1', decreasing(100)],
    ['backtick runs of 10 … 1', decreasing(10)],
    ['all backticks', fill('`')],
    ['escaped backticks', fill('\\`')],
    ['escaped backslashes before backticks', fill('\\\\\\`')],
    ['code spans', fill('`a` ')],
    ['fences opening', fill('```x\n')],
    ['quote blocks opening, nested', fill('```quote\nx `\n')],
    ['fences opening and closing', fill('```\nx\n```\n')],
    ['lazy lines under 40 `>`', (size) => `${'> '.repeat(40)}x\n${fill('y `\n')(size - 82)}`],
    ['list items', fill('- a `b\n')],
    ['headings and rules', fill('# h `\n---\n')],
    ['tabs and CR LF', fill('\ta `b`\r\n')],
  ])('%s: at most 16 steps a character, and twice the content about twice the steps', (_, make) => {
    const steps = scanSteps(make(MB));
    expect(steps).toBeLessThanOrEqual(16 * MB);
    expect(scanSteps(make(2 * MB)) / steps).toBeLessThan(2.1);
  });

  it('reads 1 MB of escaped backticks, or of backticks, as text', () => {
    expect(proseRanges(fill('\\`')(MB))).toEqual([[0, MB]]);
    expect(proseRanges(`a ${fill('`')(MB)}`)).toEqual([[0, MB + 2]]);
  });
});
