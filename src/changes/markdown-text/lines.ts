/** Pass 4's lines: what each line of a level is (classify), and the searches the block processors make. */

import {
  BACKSLASH,
  BLANK,
  DASH,
  EMPTY,
  EMPTY_QUOTE,
  GT,
  HASH,
  HEADING,
  HEADING_IF_NEXT,
  isPySpace,
  type Level,
  ODD_BACKSLASHES,
  QUOTE_LINE,
  RULE,
  type Scan,
  SMALL_BLOCK,
  SPACE,
  STAR,
  TEXT,
  UNDERSCORE,
  WHITESPACE,
} from './scan.js';

export function classify(sc: Scan, level: Level, i: number): void {
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
    else flags = textFlags(sc, s, e, p, indent);
  }
  level.flags[i] = flags;
  level.indent[i] = indent;
}

/** A text line [s, e) whose first non-space is at p: heading, rule, quote line, whitespace, an unpaired trailing backslash. */
function textFlags(sc: Scan, s: number, e: number, p: number, indent: number): number {
  const { t } = sc;
  const c = t.charCodeAt(p);
  let flags = 0;
  if (c === HASH && indent === 0) flags |= headingFlags(sc, s, e);
  if (indent <= 3 && (c === DASH || c === STAR || c === UNDERSCORE) && isRule(sc, p, e)) flags |= RULE;
  if (indent <= 3 && c === GT) flags |= QUOTE_LINE | (onlyPySpace(sc, p + 1, e) ? EMPTY_QUOTE : 0);
  if (isPySpace(c) && onlyPySpace(sc, p, e)) flags |= WHITESPACE;
  if (t.charCodeAt(e - 1) === BACKSLASH && oddTrailingBackslashes(sc, s, e)) flags |= ODD_BACKSLASHES;
  return flags;
}

export function onlyPySpace(sc: Scan, from: number, end: number): boolean {
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
export function findHeading(sc: Scan, level: Level, a: number, b: number): number {
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
export function findRule(sc: Scan, level: Level, a: number, b: number): number {
  if (b - a <= SMALL_BLOCK) {
    sc.steps += b - a;
    for (let i = a; i < b; i++) if (level.flags[i]! & RULE) return i;
    return b;
  }
  if (!(anyFlags(sc, level) & RULE)) return b;
  return Math.min(indexOf(sc, level).rule[a]!, b);
}

/** Zulip's BlockQuoteProcessor.RE search: the first `>` line, unless only empty `>` lines follow it; or b. */
export function findQuote(sc: Scan, level: Level, a: number, b: number): number {
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
