/**
 * Zulip's Markdown, just far enough to tell message text from code (M6), read the way a Zulip
 * server reads it: zerver/lib/markdown/__init__.py and fenced_code.py on Python-Markdown 3.x,
 * whose code spans are BACKTICK_RE's `(?<!\\)(`+)(.+?)(?<!`)\2(?!`)` (Zulip's own
 * BacktickInlineProcessor reads that pattern's groups). Pure, and linear in the content's length
 * whatever its backticks (test/markdown-text.test.ts counts the steps, bench/markdown-scan.ts
 * times them).
 *
 * The server reads a message in passes; so does this module, one section below each:
 * 1. Hanging lists (MarkdownListPreprocessor): a blank line goes in before a list item that
 *    follows a line that is no item, or an item of the other kind, unless the pass believes it is
 *    in a code fence (it tracks fences its own, looser way; a spoiler counts as code there).
 * 2. Whitespace (NormalizeWhitespace): CR LF and CR end lines, tabs expand to 4 columns, a line
 *    of spaces is blank, and two empty lines follow the last.
 * 3. Fences (fenced_code.py): a line that is wholly a fence, ```` ```lang header ```` or `~~~`
 *    (FENCE_RE is anchored at the line's end: ```` ```x``` text ```` opens nothing), opens a
 *    block; the line that is the same fence, trailing whitespace aside, closes it; an unclosed
 *    block runs to the end. `quote`, `quoted` and `spoiler`, in any case, hold Markdown and may
 *    hold fences; every other block (`math` and `latex` among them) is code. A spoiler's header
 *    is text; a closed block with no lines renders nothing, so the text around it joins.
 * 4. Blocks (Python-Markdown's block parser with Zulip's processors, in their order): blank lines
 *    part blocks; a block is a 4-space indented code block, or is cut at headings (`# `), rules
 *    (`---`) and its first blockquote line (`>`), is a list cut into items, or is a paragraph.
 *    Quotes and list items are read again inside, as Python-Markdown does.
 * 5. Code spans, each within one paragraph, list item or heading: an unescaped run of N backticks
 *    opens a span closed by the next run of exactly N; failing that (the pattern backtracks) by
 *    the next run of exactly N-1, … 1 of them; failing all, it is text. A backtick after an odd
 *    run of backslashes is escaped (`\``); closing runs ignore backslashes.
 *
 * Approximated, each for messages no one writes: tables are read as paragraphs (Zulip cuts their
 * cells first); a realm's default code block language is taken to be a code language; nesting
 * is read to MAX_DEPTH levels within a budget (below); the lines after a heading inside a loose
 * list item are not dedented again; list numbers are ASCII digits (Python's `\d` is Unicode's).
 */

import { element, NONE, parseChunk, ROOT } from './markdown-text/blocks.js';
import { codeSpans } from './markdown-text/code-spans.js';
import { fencedBlocks } from './markdown-text/fences.js';
import { hangingListBreaks } from './markdown-text/hanging-lists.js';
import { complement } from './markdown-text/prose.js';
import { Ints, type ProseRange, REREAD_ALLOWANCE, REREAD_PER_LINE, type Scan } from './markdown-text/scan.js';
import { lineStarts, normalize } from './markdown-text/whitespace.js';

export type { ProseRange };

/**
 * Half-open [start, end) UTF-16 ranges of `content` that Zulip's Markdown reads as text: outside
 * code spans and code blocks (fence lines included, a spoiler's header excepted), in order, not
 * overlapping, each as long as it can be. Linear in content.length.
 */
export function proseRanges(content: string): Array<ProseRange> {
  return scan(content).ranges;
}

/**
 * The work proseRanges does for `content`, in steps (characters and lines examined, lines read
 * again per nesting level, backtick-run lengths tried): for the tests and benches that hold it linear.
 */
export function scanSteps(content: string): number {
  return scan(content).steps;
}

/** Applies `edit` to each prose stretch, leaving code exactly as it was (kept for callers that rewrite strings). */
export function editOutsideCode(content: string, edit: (text: string) => string): string {
  let out = '';
  let from = 0;
  for (const [start, end] of proseRanges(content)) {
    out += content.slice(from, start) + edit(content.slice(start, end));
    from = end;
  }
  return out + content.slice(from);
}

function scan(content: string): { ranges: Array<ProseRange>; steps: number } {
  if (content === '') return { ranges: [], steps: 0 };
  // No fence, code span or indented line: no code.
  if (!/[`~\t]| {4}/.test(content)) return { ranges: [[0, content.length]], steps: content.length };
  const { t, origin, rawLineToLine } = normalize(content);
  const lines = lineStarts(t);
  const sc: Scan = {
    t,
    origin,
    fenceMarks: new Ints(),
    blockMarks: new Ints(),
    spanMarks: new Ints(),
    runs: { pos: new Int32Array(0), len: new Int32Array(0), opens: new Int32Array(0), piece: new Int32Array(0) },
    pieceStart: new Ints(),
    pieceEnd: new Ints(),
    pieceNext: new Ints(),
    unitFirst: new Ints(),
    unitLast: new Ints(),
    unitSerial: new Ints(),
    unitInterleaved: new Ints(),
    serial: 0,
    rereads: REREAD_ALLOWANCE + REREAD_PER_LINE * lines.length,
    backtickFrom: 0,
    backtickAt: t.indexOf('`'),
    steps: 2 * content.length,
  };
  const breaks = hangingListBreaks(sc, content, origin ? null : lines, rawLineToLine, lines.length - 1);
  const top = fencedBlocks(sc, lines, breaks);
  parseChunk(sc, element(ROOT), top, 0, top.n, NONE);
  if (sc.backtickAt !== -1) for (let u = 0; u < sc.unitFirst.n; u++) codeSpans(sc, u);
  return { ranges: complement(sc, content.length), steps: sc.steps };
}
