/** Pass 3, fences (fenced_code.py): the handler stack, and the block parser's top level. */

import { classify } from './lines.js';
import {
  BACKTICK,
  DOT,
  EMPTY,
  HASH,
  Ints,
  isPySpace,
  LBRACE,
  type Level,
  newLevel,
  PLACEHOLDER,
  PLUS,
  type Scan,
  SPACE,
  TEXT,
  TILDE,
  UNDERSCORE,
} from './scan.js';

/** The lang of the last matchFence, [start, end) (empty for none), and where its header starts (-1 for none). */
export let fenceLangStart = 0;
export let fenceLangEnd = 0;
let fenceHeader = -1;

/**
 * FENCE_RE: ``^(?:~{3,}|`{3,})[ ]*(?:\{?\.?([a-zA-Z0-9_+-./#]+)[ ]*([^ ~`][^~`]*)?\}?)?$`` on
 * the line [from, end): the fence's length, or 0. After the lang, nothing may be a ` or ~.
 */
export function matchFence(sc: Scan, s: string, from: number, end: number): number {
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
export function isWord(s: string, from: number, end: number, word: string, anyCase: boolean): boolean {
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

/** The end of the run of `c` (a backtick or tilde) from `from`, at most `end`; a long one found by the regex engine. */
export function runEnd(t: string, from: number, c: number, end: number): number {
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
export function fencedBlocks(sc: Scan, lines: Int32Array, breaks: Uint8Array): Level {
  const lineCount = lines.length - 1;
  if (!/^(?:```|~~~)/m.test(sc.t)) return plainLines(sc, lines, breaks);
  const pass: FencePass = {
    sc,
    lines,
    headers: [],
    groups: [],
    stack: [{ kind: OUTER, fenceChar: 0, fenceLength: 0, open: -1, items: [], codeLines: 0, mark: -1, header: -1 }],
  };
  // NormalizeWhitespace appends "\n\n": two empty lines after the last, inside any block left open.
  for (let k = 0; k < lineCount + 2; k++) {
    // A blank line pass 1 put in goes through as a line of its own (never a fence).
    if (breaks[k]) fenceLine(pass, k, false);
    fenceLine(pass, k, k < lineCount);
  }
  while (pass.stack.length > 1) closeBlock(pass, pass.stack.at(-1)!, lineCount - 1, false);
  return flatten(sc, pass.stack[0]!.items, pass.headers, pass.groups, lines);
}

/** The fence pass's state: the handler stack, and the spoiler headers and blocks closed blocks left for flatten. */
interface FencePass {
  readonly sc: Scan;
  readonly lines: Int32Array;
  readonly headers: number[];
  readonly groups: Array<{ quoted: boolean; items: number[] }>;
  readonly stack: Handler[];
}

/** Where line k of `t` ends (before its LF). */
const lineEndOf = (lines: Int32Array, k: number) => lines[k + 1]! - 1;

/** One line, given to the innermost open block: it closes that block, is a code line, opens a block, or is an item. `real`: false for a blank line pass 1 put in, or one NormalizeWhitespace appended. */
function fenceLine(pass: FencePass, k: number, real: boolean): void {
  const { sc, lines } = pass;
  const from = real ? lines[k]! : 0;
  const end = real ? lineEndOf(lines, k) : 0;
  const h = pass.stack.at(-1)!;
  sc.steps++;
  if (h.kind !== OUTER && real && closesFence(sc.t, from, end, h.fenceChar, h.fenceLength)) {
    closeBlock(pass, h, k, true);
  } else if (h.kind === CODE) {
    h.codeLines++;
  } else {
    const fence = real ? matchFence(sc, sc.t, from, end) : 0;
    if (fence) openBlock(pass, k, from, end, fence);
    else h.items.push(real ? k : EMPTY_ITEM);
  }
}

/** A fence line [from, end) at line k opens a block of the kind its lang says. */
function openBlock(pass: FencePass, k: number, from: number, end: number, fence: number): void {
  const { t, fenceMarks } = pass.sc;
  const quote = isWord(t, fenceLangStart, fenceLangEnd, 'quote', true) || isWord(t, fenceLangStart, fenceLangEnd, 'quoted', true);
  const kind = quote ? QUOTE : isWord(t, fenceLangStart, fenceLangEnd, 'spoiler', true) ? SPOILER : CODE;
  // The fence line is code (for a code block, to its close); a spoiler's header may turn out text.
  const mark = fenceMarks.n;
  fenceMarks.push(from);
  fenceMarks.push(end);
  pass.stack.push({
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

/** Closes the innermost block `h` at closeLine (`closed`: by its fence, else at the end): what it leaves goes to its parent's items. */
function closeBlock(pass: FencePass, h: Handler, closeLine: number, closed: boolean): void {
  const { sc, lines, stack, groups, headers } = pass;
  const { fenceMarks } = sc;
  stack.pop();
  const parent = stack.at(-1)!.items;
  if (h.kind === CODE) {
    fenceMarks.a[h.mark + 1] = lineEndOf(lines, closeLine);
    if (h.codeLines > 0) parent.push(EMPTY_ITEM, PLACEHOLDER_ITEM, EMPTY_ITEM);
    return;
  }
  if (closed) {
    fenceMarks.push(lines[closeLine]!);
    fenceMarks.push(lineEndOf(lines, closeLine));
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
    headers.push(h.header, lineEndOf(lines, h.open));
    parent.push(-3 - 2 * (headers.length / 2 - 1), EMPTY_ITEM);
  }
  parent.push(PLACEHOLDER_ITEM, EMPTY_ITEM, group, EMPTY_ITEM, PLACEHOLDER_ITEM, EMPTY_ITEM);
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
