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

/** Half-open [start, end) UTF-16 offsets into the content. */
export type ProseRange = readonly [start: number, end: number];

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

/**
 * Nesting (a blockquote, a list's items, a list item's indented lines: one level each) is read as
 * Python-Markdown reads it, to MAX_DEPTH levels and while the lines read again at deeper levels
 * number at most REREAD_ALLOWANCE plus REREAD_PER_LINE per line; past that a block is one
 * paragraph. Lines inside n levels are read n times, so the budget is what keeps the scan linear
 * (a message Zulip accepts, 10,000 characters at most, reaches it only when built for it).
 */
const MAX_DEPTH = 32;
const REREAD_ALLOWANCE = 20_000;
const REREAD_PER_LINE = 2;

/** Blocks of at most this many lines are searched line by line, longer ones through their level's indexes. */
const SMALL_BLOCK = 16;

/** Python-Markdown's placeholder delimiters, which NormalizeWhitespace drops from the text. */
const STX = String.fromCharCode(2);
const ETX = String.fromCharCode(3);

const TAB = 9;
const LF = 10;
const CR = 13;
const SPACE = 32;
const HASH = 35;
const STAR = 42;
const PLUS = 43;
const DASH = 45;
const DOT = 46;
const GT = 62;
const BACKSLASH = 92;
const UNDERSCORE = 95;
const BACKTICK = 96;
const LBRACE = 123;
const TILDE = 126;

/** A growable array of int32s: the scan's lists, without an object or a boxed number per entry. */
class Ints {
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
interface Scan {
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

// -------------------------------------------------------------------------------------------
// Pass 2, whitespace (done first here: its offsets are the ones the later passes work in).

/**
 * NormalizeWhitespace: STX and ETX dropped, CR LF and CR as LF, tabs to the next multiple of 4
 * columns. `rawLineToLine[m]` is the line of `t` where the content's m-th LF-separated line
 * starts (pass 1 splits the content at LF only); null when they are the same.
 */
function normalize(raw: string): { t: string; origin: Int32Array | null; rawLineToLine: Int32Array | null } {
  if (!(raw.includes('\t') || raw.includes('\r') || raw.includes(STX) || raw.includes(ETX)))
    return { t: raw, origin: null, rawLineToLine: null };
  const n = raw.length;
  // At most 4 code units for each of the content's.
  const codes = new Uint16Array(4 * n);
  const origin = new Int32Array(4 * n + 1);
  const firstLines: number[] = [0];
  let o = 0;
  let line = 0;
  let column = 0;
  let pendingCr = false;
  for (let i = 0; i < n; i++) {
    const c = raw.charCodeAt(i);
    if (c === 2 || c === 3) continue;
    if (c === LF && pendingCr) {
      // The LF of a CR LF (STX and ETX between them aside): the CR stood for the line break.
      firstLines.push(line);
      pendingCr = false;
      continue;
    }
    pendingCr = c === CR;
    if (c === TAB) {
      const width = 4 - (column % 4);
      for (let k = 0; k < width; k++) {
        codes[o] = SPACE;
        origin[o++] = i;
      }
      column += width;
      continue;
    }
    codes[o] = c === CR ? LF : c;
    origin[o++] = i;
    if (c === LF || c === CR) {
      line++;
      column = 0;
      if (c === LF) firstLines.push(line);
    } else if (!(c >= 0xdc00 && c <= 0xdfff && i > 0 && (raw.charCodeAt(i - 1) & 0xfc00) === 0xd800)) {
      // Python counts code points: the low half of a surrogate pair takes no column.
      column++;
    }
  }
  origin[o] = n;
  // Lone surrogates come out as U+FFFD: the same length, and nothing Markdown reads.
  const t = new TextDecoder('utf-16le').decode(codes.subarray(0, o));
  return { t, origin: origin.subarray(0, o + 1), rawLineToLine: raw.includes('\r') ? Int32Array.from(firstLines) : null };
}

/** Where each line of `t` starts, and one past the end (a line ends one before the next starts). */
function lineStarts(t: string): Int32Array {
  let count = 1;
  for (let i = t.indexOf('\n'); i !== -1; i = t.indexOf('\n', i + 1)) count++;
  const starts = new Int32Array(count + 1);
  let k = 1;
  for (let i = t.indexOf('\n'); i !== -1; i = t.indexOf('\n', i + 1)) starts[k++] = i + 1;
  starts[count] = t.length + 1;
  return starts;
}

// -------------------------------------------------------------------------------------------
// Pass 1, hanging lists: on the content as sent, before pass 2 (CR and tabs are plain characters).

/** LI_RE `^[ ]*([*+-]|\d\.)[ ]+`: 1 for a bullet item, 2 for a numbered one (a single digit), 0 for neither. */
function hangingItemKind(s: string, from: number, end: number): number {
  let i = from;
  while (i < end && s.charCodeAt(i) === SPACE) i++;
  const c = s.charCodeAt(i);
  let kind = 0;
  if (c === STAR || c === PLUS || c === DASH) kind = 1;
  else if (c >= 48 && c <= 57 && s.charCodeAt(i + 1) === DOT) kind = 2;
  const after = i + kind;
  return kind && after < end && s.charCodeAt(after) === SPACE ? kind : 0;
}

/** Lines of `t` before which pass 1 puts a blank line. `lines`: the content's LF-separated lines, when known. */
function hangingListBreaks(
  sc: Scan,
  raw: string,
  lines: Int32Array | null,
  rawLineToLine: Int32Array | null,
  lineCount: number,
): Uint8Array {
  const breaks = new Uint8Array(lineCount);
  // The fences pass 1 believes open, as (character, length, code) triples; how many are code.
  const open = new Ints();
  let codeOpen = 0;
  let start = 0;
  let end = lines ? lines[1]! - 1 : raw.indexOf('\n');
  if (lines ? lines.length < 3 : end === -1) return breaks;
  let kind = hangingItemKind(raw, start, end);
  for (let m = 0; ; m++) {
    const nextStart = end + 1;
    let nextEnd = lines ? lines[m + 2]! - 1 : raw.indexOf('\n', nextStart);
    if (nextEnd === -1) nextEnd = raw.length;
    const nextKind = hangingItemKind(raw, nextStart, nextEnd);
    sc.steps++;
    const fence = matchFence(sc, raw, start, end);
    if (fence) {
      const char = raw.charCodeAt(start);
      const top = open.n - 3;
      if (fenceLangStart === fenceLangEnd && top >= 0 && open.a[top] === char && open.a[top + 1] === fence) {
        codeOpen -= open.a[top + 2]!;
        open.n -= 3;
      } else {
        const code =
          isWord(raw, fenceLangStart, fenceLangEnd, 'quote', false) || isWord(raw, fenceLangStart, fenceLangEnd, 'quoted', false) ? 0 : 1;
        open.push(char);
        open.push(fence);
        open.push(code);
        codeOpen += code;
      }
    }
    if (codeOpen === 0 && end > start && nextKind && (!kind || kind !== nextKind)) {
      breaks[rawLineToLine ? rawLineToLine[m + 1]! : m + 1] = 1;
    }
    if (nextEnd === raw.length) return breaks;
    start = nextStart;
    end = nextEnd;
    kind = nextKind;
  }
}

// -------------------------------------------------------------------------------------------
// Pass 3, fences.

/** The lang of the last matchFence, [start, end) (empty for none), and where its header starts (-1 for none). */
let fenceLangStart = 0;
let fenceLangEnd = 0;
let fenceHeader = -1;

/**
 * FENCE_RE: ``^(?:~{3,}|`{3,})[ ]*(?:\{?\.?([a-zA-Z0-9_+-./#]+)[ ]*([^ ~`][^~`]*)?\}?)?$`` on
 * the line [from, end): the fence's length, or 0. After the lang, nothing may be a ` or ~.
 */
function matchFence(sc: Scan, s: string, from: number, end: number): number {
  const c = s.charCodeAt(from);
  if (c !== BACKTICK && c !== TILDE) return 0;
  let i = runEnd(s, from, c, end);
  const length = i - from;
  if (length < 3) return 0;
  sc.steps += end - from;
  while (i < end && s.charCodeAt(i) === SPACE) i++;
  fenceLangStart = fenceLangEnd = i;
  fenceHeader = -1;
  if (i === end) return length;
  let langStart = i;
  if (s.charCodeAt(langStart) === LBRACE) langStart++;
  const dotted = s.charCodeAt(langStart) === DOT;
  if (dotted) langStart++;
  let langEnd = langStart;
  while (langEnd < end && isLangChar(s.charCodeAt(langEnd))) langEnd++;
  if (langEnd === langStart) {
    // `\.?` gives its dot back to the lang (the range `+-.` holds it); `\{?` cannot.
    if (!dotted) return 0;
    langStart--;
  }
  for (let k = langEnd; k < end; k++) {
    const d = s.charCodeAt(k);
    if (d === BACKTICK || d === TILDE) return 0;
  }
  fenceLangStart = langStart;
  fenceLangEnd = langEnd;
  let header = langEnd;
  while (header < end && s.charCodeAt(header) === SPACE) header++;
  fenceHeader = header < end ? header : -1;
  return length;
}

function isLangChar(c: number): boolean {
  return (
    (c >= 97 && c <= 122) ||
    (c >= 65 && c <= 90) ||
    (c >= 48 && c <= 57) ||
    c === UNDERSCORE ||
    (c >= PLUS && c <= DOT) ||
    c === 47 ||
    c === HASH
  );
}

/** Whether s[from, end) is `word` (lowercase ASCII), in any case when `anyCase` (`lang.lower()`). */
function isWord(s: string, from: number, end: number, word: string, anyCase: boolean): boolean {
  if (end - from !== word.length) return false;
  for (let i = 0; i < word.length; i++) {
    const c = s.charCodeAt(from + i);
    if (c !== word.charCodeAt(i) && !(anyCase && c + 32 === word.charCodeAt(i))) return false;
  }
  return true;
}

/** `line.rstrip() == fence`: the fence, then only whitespace. */
function closesFence(t: string, from: number, end: number, fenceChar: number, fenceLength: number): boolean {
  if (end - from < fenceLength) return false;
  for (let i = from; i < from + fenceLength; i++) if (t.charCodeAt(i) !== fenceChar) return false;
  for (let i = from + fenceLength; i < end; i++) if (!isPySpace(t.charCodeAt(i))) return false;
  return true;
}

/** Python's str.isspace() and `\s`. */
function isPySpace(c: number): boolean {
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

/** The end of the run of `c` (a backtick or tilde) from `from`, at most `end`; a long one found by the regex engine. */
function runEnd(t: string, from: number, c: number, end: number): number {
  const near = Math.min(end, from + 32);
  let i = from;
  while (i < near && t.charCodeAt(i) === c) i++;
  if (i < near || i === end) return i;
  const other = c === BACKTICK ? NOT_BACKTICK : NOT_TILDE;
  other.lastIndex = i;
  const found = other.exec(t);
  return found ? Math.min(found.index, end) : end;
}

const NOT_BACKTICK = /[^`]/g;
const NOT_TILDE = /[^~]/g;

/** The fence pass's items (see fencedBlocks), besides line numbers and refs. */
const EMPTY_ITEM = -1;
const PLACEHOLDER_ITEM = -2;

const OUTER = 0;
const CODE = 1;
const QUOTE = 2;
const SPOILER = 3;

interface Handler {
  kind: number;
  fenceChar: number;
  fenceLength: number;
  /** The line of the opening fence. */
  open: number;
  /** QUOTE, SPOILER, OUTER: what they hold, as items. */
  items: number[];
  /** CODE: lines held; CODE, SPOILER: the index in fenceMarks of their open mark, to finish at the close. */
  codeLines: number;
  mark: number;
  header: number;
}

/**
 * The fence pass, as fenced_code.py's handler stack: each line goes to the innermost open
 * block. What a closed block leaves is its items between blank lines: a code block one
 * placeholder line (its lines are marked code), a quote block its lines under one more `> `,
 * a spoiler block its header and lines between placeholder lines. Items are line numbers of
 * `t`, EMPTY_ITEM, PLACEHOLDER_ITEM, or refs to a spoiler header (`-3 - 2h`) or to a block's
 * items (`-4 - 2g`), so nesting copies nothing. Returns the block parser's top level.
 */
function fencedBlocks(sc: Scan, lines: Int32Array, breaks: Uint8Array): Level {
  const { t, fenceMarks } = sc;
  const lineCount = lines.length - 1;
  if (!/^(?:```|~~~)/m.test(t)) return plainLines(sc, lines, breaks);
  const headers: number[] = [];
  const groups: Array<{ quoted: boolean; items: number[] }> = [];
  const stack: Handler[] = [{ kind: OUTER, fenceChar: 0, fenceLength: 0, open: -1, items: [], codeLines: 0, mark: -1, header: -1 }];
  const lineEnd = (k: number) => lines[k + 1]! - 1;

  const done = (h: Handler, closeLine: number, closed: boolean) => {
    stack.pop();
    const parent = stack.at(-1)!.items;
    if (h.kind === CODE) {
      fenceMarks.a[h.mark + 1] = lineEnd(closeLine);
      if (h.codeLines > 0) parent.push(EMPTY_ITEM, PLACEHOLDER_ITEM, EMPTY_ITEM);
      return;
    }
    if (closed) {
      fenceMarks.push(lines[closeLine]!);
      fenceMarks.push(lineEnd(closeLine));
    }
    const shown = h.items.length > 0;
    if (!shown) return;
    groups.push({ quoted: h.kind === QUOTE, items: h.items });
    const group = -4 - 2 * (groups.length - 1);
    if (h.kind === QUOTE) {
      parent.push(EMPTY_ITEM, group, EMPTY_ITEM);
      return;
    }
    // format_spoiler: "\n\n".join([placeholder, header, placeholder, text, placeholder]).
    parent.push(EMPTY_ITEM, PLACEHOLDER_ITEM, EMPTY_ITEM);
    if (h.header >= 0) {
      // The header is text after all: its mark shrinks to the fence before it.
      fenceMarks.a[h.mark + 1] = h.header;
      headers.push(h.header, lineEnd(h.open));
      parent.push(-3 - 2 * (headers.length / 2 - 1), EMPTY_ITEM);
    }
    parent.push(PLACEHOLDER_ITEM, EMPTY_ITEM, group, EMPTY_ITEM, PLACEHOLDER_ITEM, EMPTY_ITEM);
  };

  // NormalizeWhitespace appends "\n\n": two empty lines after the last, inside any block left open.
  for (let k = 0; k < lineCount + 2; k++) {
    // A blank line pass 1 put in goes through as a line of its own (never a fence).
    for (let pass = breaks[k] ? 0 : 1; pass < 2; pass++) {
      const real = pass === 1 && k < lineCount;
      const from = real ? lines[k]! : 0;
      const end = real ? lineEnd(k) : 0;
      const h = stack.at(-1)!;
      sc.steps++;
      if (h.kind !== OUTER && real && closesFence(t, from, end, h.fenceChar, h.fenceLength)) {
        done(h, k, true);
      } else if (h.kind === CODE) {
        h.codeLines++;
      } else {
        const fence = real ? matchFence(sc, t, from, end) : 0;
        if (!fence) {
          h.items.push(real ? k : EMPTY_ITEM);
          continue;
        }
        const quote = isWord(t, fenceLangStart, fenceLangEnd, 'quote', true) || isWord(t, fenceLangStart, fenceLangEnd, 'quoted', true);
        const kind = quote ? QUOTE : isWord(t, fenceLangStart, fenceLangEnd, 'spoiler', true) ? SPOILER : CODE;
        // The fence line is code (for a code block, to its close); a spoiler's header may turn out text.
        const mark = fenceMarks.n;
        fenceMarks.push(from);
        fenceMarks.push(end);
        stack.push({
          kind,
          fenceChar: t.charCodeAt(from),
          fenceLength: fence,
          open: k,
          items: [],
          codeLines: 0,
          mark,
          header: fenceHeader,
        });
      }
    }
  }
  while (stack.length > 1) done(stack.at(-1)!, lineCount - 1, false);
  return flatten(sc, stack[0]!.items, headers, groups, lines);
}

/** The top level when no line is a fence: the lines, and the blank lines pass 1 put in. */
function plainLines(sc: Scan, lines: Int32Array, breaks: Uint8Array): Level {
  const lineCount = lines.length - 1;
  let n = lineCount;
  for (let k = 0; k < lineCount; k++) n += breaks[k]!;
  const level = newLevel(n, 0);
  for (let k = 0, i = 0; k < lineCount; k++) {
    if (breaks[k]) {
      level.k[i] = EMPTY;
      classify(sc, level, i++);
    }
    level.s[i] = lines[k]!;
    level.e[i] = lines[k + 1]! - 1;
    classify(sc, level, i++);
  }
  return level;
}

/** The top level: every item as a line, a quote block's lines under one more virtual `> `. */
function flatten(
  sc: Scan,
  items: number[],
  headers: number[],
  groups: Array<{ quoted: boolean; items: number[] }>,
  lines: Int32Array,
): Level {
  const s = new Ints();
  const e = new Ints();
  const q = new Ints();
  const kinds = new Ints();
  const work: Array<{ items: number[]; at: number; quotes: number }> = [{ items, at: 0, quotes: 0 }];
  while (work.length > 0) {
    const frame = work.at(-1)!;
    if (frame.at === frame.items.length) {
      work.pop();
      continue;
    }
    const item = frame.items[frame.at++]!;
    sc.steps++;
    if (item <= -4 && (-item - 4) % 2 === 0) {
      const group = groups[(-item - 4) / 2]!;
      work.push({ items: group.items, at: 0, quotes: frame.quotes + (group.quoted ? 1 : 0) });
      continue;
    }
    const header = (-item - 3) / 2;
    s.push(item >= 0 ? lines[item]! : item <= -3 ? headers[2 * header]! : 0);
    e.push(item >= 0 ? lines[item + 1]! - 1 : item <= -3 ? headers[2 * header + 1]! : 0);
    q.push(frame.quotes);
    kinds.push(item >= 0 || item <= -3 ? TEXT : item === EMPTY_ITEM ? EMPTY : PLACEHOLDER);
  }
  const level = newLevel(s.n, 0);
  level.s.set(s.a.subarray(0, s.n));
  level.e.set(e.a.subarray(0, s.n));
  level.q.set(q.a.subarray(0, s.n));
  level.k.set(kinds.a.subarray(0, s.n));
  for (let i = 0; i < level.n; i++) classify(sc, level, i);
  return level;
}

// -------------------------------------------------------------------------------------------
// Pass 4, blocks: Python-Markdown's BlockParser with Zulip's block processors.

/** A line as a level sees it: text [s, e) of `t` after `q` virtual `> ` (a quote block's), of a kind. */
const TEXT = 0;
const EMPTY = 1;
const PLACEHOLDER = 2;

/** What a line is at its level (classify). */
const BLANK = 1;
const HEADING = 2;
const HEADING_IF_NEXT = 4;
const RULE = 8;
const QUOTE_LINE = 16;
const EMPTY_QUOTE = 32;
const WHITESPACE = 64;
const ODD_BACKSLASHES = 128;

/** The lines one parse call reads: the top level, a quote's cleaned lines, a list's items, a dedented block. */
interface Level {
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

function newLevel(n: number, depth: number): Level {
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
function mayNest(sc: Scan, level: Level, a: number, b: number): boolean {
  return level.depth < MAX_DEPTH && b - a <= sc.rereads;
}

/** Lines [a, b) of `from` as a level one deeper; the caller changes lines and classifies those again. */
function subLevel(sc: Scan, from: Level, a: number, b: number): Level {
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

function classify(sc: Scan, level: Level, i: number): void {
  const { t } = sc;
  const s = level.s[i]!;
  const e = level.e[i]!;
  const q = level.q[i]!;
  const kind = level.k[i]!;
  let flags = 0;
  let indent = 0;
  sc.steps++;
  if (q > 0) {
    // Under a quote block's virtual `> `.
    flags = QUOTE_LINE;
    if (q === 1 && (kind === EMPTY || (kind === TEXT && onlyPySpace(sc, s, e)))) flags |= EMPTY_QUOTE;
  } else if (kind === EMPTY) {
    flags = BLANK | WHITESPACE;
  } else if (kind === TEXT) {
    let p = s;
    while (p < e && t.charCodeAt(p) === SPACE) p++;
    sc.steps += p - s;
    indent = Math.min(p - s, 255);
    // A line of spaces is blank, but for the message's first (NormalizeWhitespace's `(?<=\n) +\n` needs a line before).
    if (p === e) flags = s === 0 && e > 0 ? WHITESPACE : BLANK | WHITESPACE;
    else {
      const c = t.charCodeAt(p);
      if (c === HASH && indent === 0) flags |= headingFlags(sc, s, e);
      if (indent <= 3 && (c === DASH || c === STAR || c === UNDERSCORE) && isRule(sc, p, e)) flags |= RULE;
      if (indent <= 3 && c === GT) flags |= QUOTE_LINE | (onlyPySpace(sc, p + 1, e) ? EMPTY_QUOTE : 0);
      if (isPySpace(c) && onlyPySpace(sc, p, e)) flags |= WHITESPACE;
      if (t.charCodeAt(e - 1) === BACKSLASH && oddTrailingBackslashes(sc, s, e)) flags |= ODD_BACKSLASHES;
    }
  }
  level.flags[i] = flags;
  level.indent[i] = indent;
}

function onlyPySpace(sc: Scan, from: number, end: number): boolean {
  for (let i = from; i < end; i++) {
    sc.steps++;
    if (!isPySpace(sc.t.charCodeAt(i))) return false;
  }
  return true;
}

function oddTrailingBackslashes(sc: Scan, from: number, end: number): boolean {
  let i = end;
  while (i > from && sc.t.charCodeAt(i - 1) === BACKSLASH) i--;
  sc.steps += end - i;
  return (end - i) % 2 === 1;
}

/**
 * Zulip's HashHeaderProcessor.RE, `(?:^|\n)(#{1,6})\s((?:\\.|[^\\])*?)#*(?:\n|$)`: 1 to 6 `#`,
 * whitespace, and text that does not end in an unpaired backslash; `#` alone on its line takes
 * the next line for its text (the `\s` is the line break).
 */
function headingFlags(sc: Scan, s: number, e: number): number {
  const { t } = sc;
  let p = s;
  while (p < e && t.charCodeAt(p) === HASH) p++;
  if (p - s > 6) return 0;
  if (p === e) return HEADING_IF_NEXT;
  return isPySpace(t.charCodeAt(p)) && !oddTrailingBackslashes(sc, p + 1, e) ? HEADING : 0;
}

/** HRProcessor.RE after its up to 3 spaces: 3 or more of one of `-*_`, at most 2 spaces between, then spaces. */
function isRule(sc: Scan, from: number, end: number): boolean {
  const { t } = sc;
  const c = t.charCodeAt(from);
  let count = 0;
  let gap = 0;
  let i = from;
  for (; i < end; i++) {
    const d = t.charCodeAt(i);
    if (d === c) {
      if (gap > 2) break;
      count++;
      gap = 0;
    } else if (d === SPACE) gap++;
    else break;
  }
  sc.steps += i - from;
  return i === end && count >= 3;
}

/** `#` alone is a heading only with a next line in the block that does not end in an unpaired backslash. */
function isHeadingAt(level: Level, i: number, b: number): boolean {
  const f = level.flags[i]!;
  return (f & HEADING) !== 0 || ((f & HEADING_IF_NEXT) !== 0 && i + 1 < b && (level.flags[i + 1]! & ODD_BACKSLASHES) === 0);
}

function anyFlags(sc: Scan, level: Level): number {
  if (level.any === -1) {
    let any = 0;
    for (let i = 0; i < level.n; i++) any |= level.flags[i]!;
    level.any = any;
    sc.steps += level.n;
  }
  return level.any;
}

function indexOf(sc: Scan, level: Level): NonNullable<Level['index']> {
  if (level.index) return level.index;
  const { n, flags } = level;
  const heading = new Int32Array(n + 1);
  const rule = new Int32Array(n + 1);
  const quote = new Int32Array(n + 1);
  const notEmptyQuote = new Int32Array(n);
  heading[n] = rule[n] = quote[n] = n;
  for (let i = n - 1; i >= 0; i--) {
    const f = flags[i]!;
    heading[i] = isHeadingAt(level, i, n) ? i : heading[i + 1]!;
    rule[i] = f & RULE ? i : rule[i + 1]!;
    quote[i] = f & QUOTE_LINE ? i : quote[i + 1]!;
  }
  for (let i = 0; i < n; i++) notEmptyQuote[i] = flags[i]! & EMPTY_QUOTE ? (i > 0 ? notEmptyQuote[i - 1]! : -1) : i;
  sc.steps += 2 * n;
  level.index = { heading, rule, quote, notEmptyQuote };
  return level.index;
}

/** HashHeaderProcessor's search: the block's first heading line, or b. */
function findHeading(sc: Scan, level: Level, a: number, b: number): number {
  if (b - a <= SMALL_BLOCK) {
    sc.steps += b - a;
    for (let i = a; i < b; i++) if (isHeadingAt(level, i, b)) return i;
    return b;
  }
  if (!(anyFlags(sc, level) & (HEADING | HEADING_IF_NEXT))) return b;
  const h = indexOf(sc, level).heading[a]!;
  // A `#` alone on the block's last line has no next line here.
  return h < b && isHeadingAt(level, h, b) ? h : b;
}

/** HRProcessor's search: the block's first rule, or b. */
function findRule(sc: Scan, level: Level, a: number, b: number): number {
  if (b - a <= SMALL_BLOCK) {
    sc.steps += b - a;
    for (let i = a; i < b; i++) if (level.flags[i]! & RULE) return i;
    return b;
  }
  if (!(anyFlags(sc, level) & RULE)) return b;
  return Math.min(indexOf(sc, level).rule[a]!, b);
}

/** Zulip's BlockQuoteProcessor.RE search: the first `>` line, unless only empty `>` lines follow it; or b. */
function findQuote(sc: Scan, level: Level, a: number, b: number): number {
  // The common case of a quote: its first line.
  if ((level.flags[a]! & (QUOTE_LINE | EMPTY_QUOTE)) === QUOTE_LINE) return a;
  if (b - a <= SMALL_BLOCK) {
    sc.steps += b - a;
    let first = b;
    for (let i = a; i < b; i++) {
      const f = level.flags[i]!;
      if (f & QUOTE_LINE && first === b) first = i;
      if (first < b && !(f & EMPTY_QUOTE)) return first;
    }
    return b;
  }
  if (!(anyFlags(sc, level) & QUOTE_LINE)) return b;
  const index = indexOf(sc, level);
  const first = index.quote[a]!;
  return first < b && index.notEmptyQuote[b - 1]! >= first ? first : b;
}

/** The tags the parse tells apart, and the parser states it reads (BlockParser.state's top). */
const ROOT = 0;
const PARAGRAPH = 1;
const LIST_ITEM = 2;
const BULLETS = 3;
const NUMBERS = 4;
const HEADING_TAG = 5;
const RULE_TAG = 6;
const PRE = 7;
const BLOCKQUOTE = 8;

const NONE = 0;
const IN_LIST = 1;
const LOOSE_LIST = 2;
const DETABBED = 3;
const IN_QUOTE = 4;

/** An element, as far as a processor looks at it: its tag, its last child, its text's and tail's units (-1: none). */
interface Element {
  tag: number;
  last: Element | null;
  text: number;
  tail: number;
}

function element(tag: number): Element {
  return { tag, last: null, text: -1, tail: -1 };
}

function append(parent: Element, tag: number): Element {
  const child = element(tag);
  parent.last = child;
  return child;
}

function isList(e: Element | null): boolean {
  return e !== null && (e.tag === BULLETS || e.tag === NUMBERS);
}

/** A new unit (into = -1), or more text for unit `into`: one piece per text line of [a, b). */
function unitOf(sc: Scan, level: Level, a: number, b: number, into: number): number {
  let unit = into;
  if (unit === -1) {
    unit = sc.unitFirst.n;
    sc.unitFirst.push(-1);
    sc.unitLast.push(-1);
    sc.unitSerial.push(0);
    sc.unitInterleaved.push(0);
  } else if (sc.unitSerial.a[unit] !== sc.serial) sc.unitInterleaved.a[unit] = 1;
  for (let i = a; i < b; i++) if (level.k[i] === TEXT) addPiece(sc, unit, level.s[i]!, level.e[i]!);
  sc.steps += b - a;
  sc.unitSerial.a[unit] = ++sc.serial;
  return unit;
}

function addPiece(sc: Scan, unit: number, start: number, end: number): void {
  const piece = sc.pieceStart.n;
  sc.pieceStart.push(start);
  sc.pieceEnd.push(end);
  sc.pieceNext.push(-1);
  const last = sc.unitLast.a[unit]!;
  if (last === -1) sc.unitFirst.a[unit] = piece;
  else sc.pieceNext.a[last] = piece;
  sc.unitLast.a[unit] = piece;
}

/** BlockParser.parseChunk: the level's lines [a, b) in blocks, parted by blank lines. */
function parseChunk(sc: Scan, parent: Element, level: Level, a: number, b: number, state: number): void {
  sc.steps += b - a;
  let i = a;
  while (i < b) {
    while (i < b && level.flags[i]! & BLANK) i++;
    let j = i;
    while (j < b && !(level.flags[j]! & BLANK)) j++;
    if (j > i) parseBlock(sc, parent, level, i, j, state);
    i = j;
  }
}

/** BlockParser.parseBlocks on one block, lines [a, b): the first processor whose test passes runs. */
function parseBlock(sc: Scan, parent: Element, level: Level, a: number, b: number, state: number): void {
  while (a < b) {
    sc.steps++;
    // EmptyBlockProcessor: a block that starts with a blank line goes on without it.
    if (level.flags[a]! & BLANK) {
      a++;
      continue;
    }
    const nest = mayNest(sc, level, a, b);
    const indent = level.indent[a]!;
    // ListIndentProcessor (Zulip's 2-space indent): more of the list item before.
    if (nest && indent >= 2 && state !== DETABBED && (parent.tag === LIST_ITEM || isList(parent.last))) {
      listIndent(sc, parent, level, a, b, state);
      return;
    }
    // CodeBlockProcessor: the lines indented 4 or more, or blank, from the block's start.
    if (indent >= 4) {
      let k = a;
      for (; k < b && (level.indent[k]! >= 4 || level.flags[k]! & WHITESPACE); k++) {
        if (level.e[k]! > level.s[k]!) {
          sc.blockMarks.push(level.s[k]!);
          sc.blockMarks.push(level.e[k]!);
        }
      }
      sc.steps += k - a;
      if (parent.last?.tag !== PRE) append(parent, PRE);
      a = k;
      continue;
    }
    // HashHeaderProcessor: the block's first heading line, anywhere in it.
    const h = findHeading(sc, level, a, b);
    if (h < b) {
      if (h > a) parseBlock(sc, parent, level, a, h, state);
      const heading = append(parent, HEADING_TAG);
      if (level.flags[h]! & HEADING) {
        let p = level.s[h]!;
        while (sc.t.charCodeAt(p) === HASH) p++;
        heading.text = unitOf(sc, level, h, h, -1);
        addPiece(sc, heading.text, p + 1, level.e[h]!);
        a = h + 1;
      } else {
        heading.text = unitOf(sc, level, h + 1, h + 2, -1);
        a = h + 2;
      }
      continue;
    }
    // HRProcessor: the block's first rule.
    const r = findRule(sc, level, a, b);
    if (r < b) {
      if (r > a) parseBlock(sc, parent, level, a, r, state);
      append(parent, RULE_TAG);
      a = r + 1;
      continue;
    }
    // OListProcessor, UListProcessor (sane lists, Zulip's 2-space indent): a block that starts with an item.
    const kind = nest && indent <= 1 ? listItemKind(sc, level, a) : 0;
    if (kind) {
      list(sc, parent, level, a, b, kind === 1 ? BULLETS : NUMBERS);
      return;
    }
    // BlockQuoteProcessor (Zulip's RE): the first `>` line, unless only empty `>` lines follow.
    const quote = nest ? findQuote(sc, level, a, b) : b;
    if (quote < b) {
      if (quote > a) parseBlock(sc, parent, level, a, quote, state);
      blockquote(sc, parent, level, quote, b);
      return;
    }
    paragraph(sc, parent, level, a, b, state);
    return;
  }
}

/** The end of the last list marker listItemKind found, where its item's text starts. */
let markerEnd = 0;

/** A list item's marker at line i, `[*+-]` (1) or `\d+\.` (2), with spaces after it; or 0. */
function listItemKind(sc: Scan, level: Level, i: number): number {
  if (level.k[i] !== TEXT || level.q[i] !== 0) return 0;
  const { t } = sc;
  const e = level.e[i]!;
  let p = level.s[i]! + level.indent[i]!;
  const c = t.charCodeAt(p);
  let kind = 0;
  if (c === STAR || c === PLUS || c === DASH) {
    kind = 1;
    p++;
  } else if (c >= 48 && c <= 57) {
    while (p < e && t.charCodeAt(p) >= 48 && t.charCodeAt(p) <= 57) p++;
    if (p >= e || t.charCodeAt(p) !== DOT) return 0;
    kind = 2;
    p++;
  }
  if (!kind || p >= e || t.charCodeAt(p) !== SPACE) return 0;
  while (p < e && t.charCodeAt(p) === SPACE) p++;
  sc.steps += p - level.s[i]!;
  markerEnd = p;
  return kind;
}

/**
 * OListProcessor.run and get_items: an item starts at a line with this list's marker (indent 0 or
 * 1), or at an indented (2 or 3) item of either kind that does not follow an indented one; every
 * other line goes on the item before. Each item is read as a block, one level down.
 */
function list(sc: Scan, parent: Element, level: Level, a: number, b: number, tag: number): void {
  const items = subLevel(sc, level, a, b);
  const starts: number[] = [];
  const indented: boolean[] = [];
  for (let i = 0; i < items.n; i++) {
    const indent = items.indent[i]!;
    if (indent > 3) continue;
    const kind = listItemKind(sc, items, i);
    if (kind === (tag === BULLETS ? 1 : 2) && indent <= 1) {
      items.s[i] = markerEnd;
      classify(sc, items, i);
      starts.push(i);
      indented.push(false);
    } else if (kind && indent >= 2 && !indented.at(-1)) {
      starts.push(i);
      indented.push(true);
    }
  }
  starts.push(items.n);
  let list: Element;
  let first = 0;
  const sibling = parent.last;
  if (sibling?.tag === tag) {
    // After a list of its kind (across a blank line) a list goes on it, its first item loose.
    list = sibling;
    const last = list.last;
    if (last) {
      if (last.text !== -1) {
        const p = element(PARAGRAPH);
        p.text = last.text;
        last.text = -1;
        last.last ??= p;
      }
      const tailed = last.last;
      if (tailed && tailed.tail !== -1) {
        append(last, PARAGRAPH).text = tailed.tail;
        tailed.tail = -1;
      }
    }
    parseBlock(sc, append(list, LIST_ITEM), items, starts[0]!, starts[1]!, LOOSE_LIST);
    first = 1;
  } else if (isList(parent)) list = parent;
  else list = append(parent, tag);
  for (let k = first; k < starts.length - 1; k++) {
    const target = indented[k] ? (list.last ?? list) : append(list, LIST_ITEM);
    parseBlock(sc, target, items, starts[k]!, starts[k + 1]!, IN_LIST);
  }
}

/** ListIndentProcessor: an indented block after a list goes into its item at the indent's level, dedented. */
function listIndent(sc: Scan, parent: Element, level: Level, a: number, b: number, state: number): void {
  const indentLevel = level.indent[a]! >> 1;
  let depth = state === IN_LIST ? 1 : 0;
  let into = parent;
  while (indentLevel > depth) {
    const child = into.last;
    if (!child || !(isList(child) || child.tag === LIST_ITEM)) break;
    if (isList(child)) depth++;
    into = child;
  }
  const block = subLevel(sc, level, a, b);
  const cut = 2 * depth;
  if (cut > 0) {
    for (let i = 0; i < block.n; i++) {
      if (block.indent[i]! >= cut) {
        block.s[i]! += cut;
        classify(sc, block, i);
      }
    }
  }
  if (parent.tag === LIST_ITEM) {
    parseBlock(sc, isList(parent.last) ? parent.last! : parent, block, 0, block.n, DETABBED);
  } else if (into.tag === LIST_ITEM) {
    parseBlock(sc, into, block, 0, block.n, DETABBED);
  } else if (into.last?.tag === LIST_ITEM) {
    const item = into.last;
    if (item.text !== -1) {
      const p = element(PARAGRAPH);
      p.text = item.text;
      item.text = -1;
      item.last ??= p;
    }
    parseChunk(sc, item, block, 0, block.n, DETABBED);
  } else {
    parseBlock(sc, append(into, LIST_ITEM), block, 0, block.n, DETABBED);
  }
}

/** BlockQuoteProcessor: lines [a, b) without their `>` (lazy lines as they are), read as a chunk one level down. */
function blockquote(sc: Scan, parent: Element, level: Level, a: number, b: number): void {
  const quote = subLevel(sc, level, a, b);
  const { t } = sc;
  for (let i = 0; i < quote.n; i++) {
    const f = quote.flags[i]!;
    if (f & EMPTY_QUOTE || (quote.k[i] === TEXT && quote.q[i] === 0 && isLoneGt(sc, quote.s[i]!, quote.e[i]!))) {
      // clean(): a line that strips to `>` is empty.
      quote.k[i] = EMPTY;
      quote.q[i] = 0;
    } else if (quote.q[i]! > 0) {
      quote.q[i]!--;
    } else if (f & QUOTE_LINE) {
      let p = quote.s[i]! + quote.indent[i]! + 1;
      if (t.charCodeAt(p) === SPACE && p < quote.e[i]!) p++;
      quote.s[i] = p;
    } else continue;
    classify(sc, quote, i);
  }
  parseChunk(sc, append(parent, BLOCKQUOTE), quote, 0, quote.n, IN_QUOTE);
}

/** `line.strip() == ">"`. */
function isLoneGt(sc: Scan, from: number, end: number): boolean {
  let i = from;
  while (i < end && isPySpace(sc.t.charCodeAt(i))) i++;
  sc.steps += i - from;
  return i < end && sc.t.charCodeAt(i) === GT && onlyPySpace(sc, i + 1, end);
}

/** ParagraphProcessor: a new paragraph, or in a tight list item more text for the item or its last child's tail. */
function paragraph(sc: Scan, parent: Element, level: Level, a: number, b: number, state: number): void {
  let blank = true;
  for (let i = a; i < b && blank; i++) blank = (level.flags[i]! & WHITESPACE) !== 0;
  if (blank) return;
  if (state === IN_LIST) {
    const sibling = parent.last;
    if (sibling) sibling.tail = unitOf(sc, level, a, b, sibling.tail);
    else parent.text = unitOf(sc, level, a, b, parent.text);
  } else {
    append(parent, PARAGRAPH).text = unitOf(sc, level, a, b, -1);
  }
}

// -------------------------------------------------------------------------------------------
// Pass 5, code spans.

/** The next backtick at or after `from`, or -1: near ones by looking, far ones by indexOf, whose answer is kept so pieces in order search `t` once. */
function nextBacktick(sc: Scan, from: number, end: number): number {
  const { t } = sc;
  const near = Math.min(end, from + 16);
  for (let i = from; i < near; i++) {
    if (t.charCodeAt(i) === BACKTICK) {
      sc.steps += i - from;
      return i;
    }
  }
  sc.steps += near - from;
  if (near === end) return -1;
  if (!(sc.backtickFrom <= near && (near <= sc.backtickAt || sc.backtickAt === -1))) {
    sc.backtickFrom = near;
    sc.backtickAt = t.indexOf('`', near);
    sc.steps += (sc.backtickAt === -1 ? t.length : sc.backtickAt) - near;
  }
  return sc.backtickAt !== -1 && sc.backtickAt < end ? sc.backtickAt : -1;
}

/** The code spans of one unit (a paragraph, list item or heading), marked in spanMarks. */
function codeSpans(sc: Scan, unit: number): void {
  if (!singleBackticks(sc, unit)) pairRuns(sc, unit);
}

/**
 * The common case, single backticks only: each unescaped one is closed by the next, in one pass
 * and nothing kept. Returns false, having marked nothing, at the first longer run.
 */
function singleBackticks(sc: Scan, unit: number): boolean {
  const { t, spanMarks } = sc;
  const marked = spanMarks.n;
  let open = -1;
  let openPiece = -1;
  let steps = 0;
  for (let p = sc.unitFirst.a[unit]!; p !== -1; p = sc.pieceNext.a[p]!) {
    const start = sc.pieceStart.a[p]!;
    const end = sc.pieceEnd.a[p]!;
    for (let i = nextBacktick(sc, start, end); i !== -1; ) {
      if (i + 1 < end && t.charCodeAt(i + 1) === BACKTICK) {
        spanMarks.n = marked;
        sc.steps += steps;
        return false;
      }
      let k = i;
      while (k > start && t.charCodeAt(k - 1) === BACKSLASH) k--;
      if (open !== -1) {
        markSpan(sc, unit, open, openPiece, i + 1, p);
        open = -1;
      } else if ((i - k) % 2 === 0) {
        open = i;
        openPiece = p;
      }
      steps += i + 1 - k;
      i = i + 1 < end ? nextBacktick(sc, i + 1, end) : -1;
    }
    steps++;
  }
  sc.steps += steps;
  return true;
}

/**
 * The code spans of one unit, by Python-Markdown's BACKTICK_RE. A run opens at its first
 * backtick, or at its second when the first is escaped. An opening run of N (after the escape)
 * is closed by the first later run of exactly N backticks, else of exactly N-1, … 1 (the
 * regex's backtracking); that search costs at most N tries, so all of them cost at most the
 * number of backticks. The next run to open is the first after the span.
 */
function pairRuns(sc: Scan, unit: number): void {
  const { t, runs } = sc;
  let { pos, len, opens, piece } = runs;
  let count = 0;
  let maxLength = 0;
  let steps = 0;
  for (let p = sc.unitFirst.a[unit]!; p !== -1; p = sc.pieceNext.a[p]!) {
    const start = sc.pieceStart.a[p]!;
    const end = sc.pieceEnd.a[p]!;
    for (let i = nextBacktick(sc, start, end); i !== -1; ) {
      const j = runEnd(t, i, BACKTICK, end);
      let k = i;
      while (k > start && t.charCodeAt(k - 1) === BACKSLASH) k--;
      if (count === pos.length) {
        growRuns(runs);
        ({ pos, len, opens, piece } = runs);
      }
      pos[count] = i;
      len[count] = j - i;
      opens[count] = j - i - ((i - k) % 2);
      piece[count++] = p;
      if (j - i > maxLength) maxLength = j - i;
      steps += j - k;
      i = j < end ? nextBacktick(sc, j, end) : -1;
    }
    steps++;
  }
  sc.steps += steps;
  if (count < 2) return;
  // first[k]: the first run of exactly k backticks not yet passed; following[j]: the next run of j's length.
  const first = new Int32Array(maxLength + 1).fill(-1);
  const following = new Int32Array(count);
  for (let j = count - 1; j >= 0; j--) {
    following[j] = first[len[j]!]!;
    first[len[j]!] = j;
  }
  sc.steps += count + maxLength;
  for (let i = 0; i < count; ) {
    let close = -1;
    for (let k = opens[i]!; k >= 1 && close === -1; k--) {
      let j = first[k]!;
      while (j !== -1 && j <= i) {
        j = following[j]!;
        sc.steps++;
      }
      first[k] = j;
      close = j;
      sc.steps++;
    }
    if (close === -1) i++;
    else {
      span(sc, unit, i, close);
      i = close + 1;
    }
  }
}

interface Runs {
  pos: Int32Array;
  len: Int32Array;
  opens: Int32Array;
  piece: Int32Array;
}

function growRuns(runs: Runs): void {
  for (const key of ['pos', 'len', 'opens', 'piece'] as const) {
    const grown = new Int32Array(Math.max(64, 2 * runs[key].length));
    grown.set(runs[key]);
    runs[key] = grown;
  }
}

/** Marks the span from run `open` (after its escape) to the end of run `close`. */
function span(sc: Scan, unit: number, open: number, close: number): void {
  const { pos, len, opens, piece } = sc.runs;
  markSpan(sc, unit, pos[open]! + len[open]! - opens[open]!, piece[open]!, pos[close]! + len[close]!, piece[close]!);
}

/** Marks [from, to) of `unit`, `from` in piece fromPiece and `to` in toPiece. */
function markSpan(sc: Scan, unit: number, from: number, fromPiece: number, to: number, toPiece: number): void {
  const marks = sc.spanMarks;
  if (!sc.unitInterleaved.a[unit] || fromPiece === toPiece) {
    marks.push(from);
    marks.push(to);
    return;
  }
  // The unit's pieces may enclose another unit's text: mark each piece's part alone.
  marks.push(from);
  marks.push(sc.pieceEnd.a[fromPiece]!);
  for (let p = sc.pieceNext.a[fromPiece]!; p !== toPiece; p = sc.pieceNext.a[p]!) {
    marks.push(sc.pieceStart.a[p]!);
    marks.push(sc.pieceEnd.a[p]!);
  }
  marks.push(sc.pieceStart.a[toPiece]!);
  marks.push(to);
}

// -------------------------------------------------------------------------------------------
// The prose: what no mark covers, in the content's offsets.

/** The marks as [start, end) pairs sorted by start: as they are when in order (the usual), else sorted. */
function sortedPairs(marks: Ints): Int32Array {
  const pairs = marks.a.subarray(0, marks.n);
  let inOrder = true;
  for (let m = 2; m < pairs.length && inOrder; m += 2) inOrder = pairs[m]! >= pairs[m - 2]!;
  if (inOrder) return pairs;
  const order = Array.from({ length: pairs.length / 2 }, (_, i) => i).sort((x, y) => pairs[2 * x]! - pairs[2 * y]!);
  const sorted = new Int32Array(pairs.length);
  order.forEach((x, i) => {
    sorted[2 * i] = pairs[2 * x]!;
    sorted[2 * i + 1] = pairs[2 * x + 1]!;
  });
  return sorted;
}

function complement(sc: Scan, contentLength: number): Array<ProseRange> {
  const { t, origin } = sc;
  const lists = [sortedPairs(sc.fenceMarks), sortedPairs(sc.blockMarks), sortedPairs(sc.spanMarks)];
  const next = [0, 0, 0];
  // The prose's bounds first, the ranges then in an array of their number (a grown one costs more).
  const bounds = new Int32Array(lists[0]!.length + lists[1]!.length + lists[2]!.length + 2);
  let count = 0;
  /** Where the code so far ends: prose runs from there to the next mark's start. */
  let covered = 0;
  for (;;) {
    let pick = -1;
    for (let l = 0; l < 3; l++) {
      if (next[l]! < lists[l]!.length && (pick === -1 || lists[l]![next[l]!]! < lists[pick]![next[pick]!]!)) pick = l;
    }
    if (pick === -1) break;
    const start = lists[pick]![next[pick]!]!;
    const end = lists[pick]![next[pick]! + 1]!;
    next[pick]! += 2;
    if (end <= start) continue;
    if (start > covered) {
      bounds[count++] = covered;
      bounds[count++] = start;
    }
    covered = Math.max(covered, end);
  }
  if (t.length > covered) {
    bounds[count++] = covered;
    bounds[count++] = t.length;
  }
  sc.steps += bounds.length / 2;
  const ranges = new Array<ProseRange>(count / 2);
  for (let r = 0; r < count; r += 2) {
    const end = bounds[r + 1]!;
    ranges[r / 2] = origin ? [origin[bounds[r]!]!, end === t.length ? contentLength : origin[end]!] : [bounds[r]!, end];
  }
  return ranges;
}
