/**
 * One scan's state and what every pass shares: the nesting budget, character codes, the growable
 * int lists, and the lines of a level as the block parser reads them.
 */

/** Half-open [start, end) UTF-16 offsets into the content. */
export type ProseRange = readonly [start: number, end: number];

/**
 * Nesting (a blockquote, a list's items, a list item's indented lines: one level each) is read as
 * Python-Markdown reads it, to MAX_DEPTH levels and while the lines read again at deeper levels
 * number at most REREAD_ALLOWANCE plus REREAD_PER_LINE per line; past that a block is one
 * paragraph. Lines inside n levels are read n times, so the budget is what keeps the scan linear
 * (a message Zulip accepts, 10,000 characters at most, reaches it only when built for it).
 */
const MAX_DEPTH = 32;
export const REREAD_ALLOWANCE = 20_000;
export const REREAD_PER_LINE = 2;

/** Blocks of at most this many lines are searched line by line, longer ones through their level's indexes. */
export const SMALL_BLOCK = 16;

/** Python-Markdown's placeholder delimiters, which NormalizeWhitespace drops from the text. */
export const STX = String.fromCharCode(2);
export const ETX = String.fromCharCode(3);

export const TAB = 9;
export const LF = 10;
export const CR = 13;
export const SPACE = 32;
export const HASH = 35;
export const STAR = 42;
export const PLUS = 43;
export const DASH = 45;
export const DOT = 46;
export const GT = 62;
export const BACKSLASH = 92;
export const UNDERSCORE = 95;
export const BACKTICK = 96;
export const LBRACE = 123;
export const TILDE = 126;

/** A growable array of int32s: the scan's lists, without an object or a boxed number per entry. */
export class Ints {
  a = new Int32Array(16);
  n = 0;
  push(x: number): void {
    if (this.n === this.a.length) {
      const grown = new Int32Array(this.a.length * 2);
      grown.set(this.a);
      this.a = grown;
    }
    this.a[this.n++] = x;
  }
}

/** One scan's state. Units (paragraphs, list items, headings: what code spans pair within) and their pieces are indexes. */
export interface Scan {
  /** The text as the block parser sees it (pass 2); the content's offset of its `i` is `origin[i]`. */
  readonly t: string;
  readonly origin: Int32Array | null;
  /** Code, as [start, end) pairs of `t`, in three lists each in order: fences, indented code blocks, code spans. */
  readonly fenceMarks: Ints;
  readonly blockMarks: Ints;
  readonly spanMarks: Ints;
  /** The backtick runs of the unit codeSpans reads: where, how long, how many may open, in which piece. */
  readonly runs: Runs;
  /** Per piece of a unit's text (a line's part): its [start, end) and the next piece of its unit, or -1. */
  readonly pieceStart: Ints;
  readonly pieceEnd: Ints;
  readonly pieceNext: Ints;
  /** Per unit: its first and last piece, when it last changed (`serial`), whether another unit came between its pieces. */
  readonly unitFirst: Ints;
  readonly unitLast: Ints;
  readonly unitSerial: Ints;
  readonly unitInterleaved: Ints;
  serial: number;
  /** Lines nesting may still read again (REREAD_ALLOWANCE, REREAD_PER_LINE). */
  rereads: number;
  /** Where the next backtick at or after `backtickFrom` is (-1: none), so pieces in order search the text once. */
  backtickFrom: number;
  backtickAt: number;
  steps: number;
}

/** Python's str.isspace() and `\s`. */
export function isPySpace(c: number): boolean {
  return (
    c === SPACE ||
    (c >= TAB && c <= CR) ||
    (c >= 0x1c && c <= 0x1f) ||
    c === 0x85 ||
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000
  );
}

interface Runs {
  pos: Int32Array;
  len: Int32Array;
  opens: Int32Array;
  piece: Int32Array;
}

export function growRuns(runs: Runs): void {
  for (const key of ['pos', 'len', 'opens', 'piece'] as const) {
    const grown = new Int32Array(Math.max(64, 2 * runs[key].length));
    grown.set(runs[key]);
    runs[key] = grown;
  }
}

/** A line as a level sees it: text [s, e) of `t` after `q` virtual `> ` (a quote block's), of a kind. */
export const TEXT = 0;
export const EMPTY = 1;
export const PLACEHOLDER = 2;

/** What a line is at its level (classify). */
export const BLANK = 1;
export const HEADING = 2;
export const HEADING_IF_NEXT = 4;
export const RULE = 8;
export const QUOTE_LINE = 16;
export const EMPTY_QUOTE = 32;
export const WHITESPACE = 64;
export const ODD_BACKSLASHES = 128;

/** The lines one parse call reads: the top level, a quote's cleaned lines, a list's items, a dedented block. */
export interface Level {
  n: number;
  depth: number;
  s: Int32Array;
  e: Int32Array;
  q: Int32Array;
  k: Int32Array;
  flags: Uint8Array;
  /** Leading spaces, up to 255. */
  indent: Uint8Array;
  /** The flags of all lines or'ed, once asked (-1 before): a level without headings is not searched for one. */
  any: number;
  /** For long blocks: the first line at or after i that is a heading, a rule, a quote line; the last at or before i that is no empty quote line. */
  index: { heading: Int32Array; rule: Int32Array; quote: Int32Array; notEmptyQuote: Int32Array } | null;
}

export function newLevel(n: number, depth: number): Level {
  return {
    n,
    depth,
    s: new Int32Array(n),
    e: new Int32Array(n),
    q: new Int32Array(n),
    k: new Int32Array(n),
    flags: new Uint8Array(n),
    indent: new Uint8Array(n),
    any: -1,
    index: null,
  };
}

/** Whether lines [a, b) may be read again one level deeper (MAX_DEPTH, REREAD_ALLOWANCE). */
export function mayNest(sc: Scan, level: Level, a: number, b: number): boolean {
  return level.depth < MAX_DEPTH && b - a <= sc.rereads;
}

/** Lines [a, b) of `from` as a level one deeper; the caller changes lines and classifies those again. */
export function subLevel(sc: Scan, from: Level, a: number, b: number): Level {
  sc.rereads -= b - a;
  sc.steps += b - a;
  const level = newLevel(b - a, from.depth + 1);
  level.s.set(from.s.subarray(a, b));
  level.e.set(from.e.subarray(a, b));
  level.q.set(from.q.subarray(a, b));
  level.k.set(from.k.subarray(a, b));
  level.flags.set(from.flags.subarray(a, b));
  level.indent.set(from.indent.subarray(a, b));
  return level;
}
