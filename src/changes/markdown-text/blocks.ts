/** Pass 4, blocks: Python-Markdown's BlockParser with Zulip's block processors. */

import { classify, findHeading, findQuote, findRule, onlyPySpace } from './lines.js';
import {
  BLANK,
  DASH,
  DOT,
  EMPTY,
  EMPTY_QUOTE,
  GT,
  HASH,
  HEADING,
  isPySpace,
  type Level,
  mayNest,
  PLUS,
  QUOTE_LINE,
  type Scan,
  SPACE,
  STAR,
  subLevel,
  TEXT,
  WHITESPACE,
} from './scan.js';

/** The tags the parse tells apart, and the parser states it reads (BlockParser.state's top). */
export const ROOT = 0;
const PARAGRAPH = 1;
const LIST_ITEM = 2;
const BULLETS = 3;
const NUMBERS = 4;
const HEADING_TAG = 5;
const RULE_TAG = 6;
const PRE = 7;
const BLOCKQUOTE = 8;

export const NONE = 0;
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

export function element(tag: number): Element {
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
export function parseChunk(sc: Scan, parent: Element, level: Level, a: number, b: number, state: number): void {
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
      a = codeBlock(sc, parent, level, a, b);
      continue;
    }
    // HashHeaderProcessor: the block's first heading line, anywhere in it.
    const h = findHeading(sc, level, a, b);
    if (h < b) {
      if (h > a) parseBlock(sc, parent, level, a, h, state);
      a = heading(sc, parent, level, h);
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
    restOfBlock(sc, parent, level, a, b, state, nest && indent <= 1, nest);
    return;
  }
}

/** CodeBlockProcessor: lines from a indented 4 or more, or blank, are code; returns the line after them. */
function codeBlock(sc: Scan, parent: Element, level: Level, a: number, b: number): number {
  let k = a;
  for (; k < b && (level.indent[k]! >= 4 || level.flags[k]! & WHITESPACE); k++) {
    if (level.e[k]! > level.s[k]!) {
      sc.blockMarks.push(level.s[k]!);
      sc.blockMarks.push(level.e[k]!);
    }
  }
  sc.steps += k - a;
  if (parent.last?.tag !== PRE) append(parent, PRE);
  return k;
}

/** HashHeaderProcessor's heading at line h (`# text`, or `#` alone with the next line its text); returns the line after it. */
function heading(sc: Scan, parent: Element, level: Level, h: number): number {
  const element = append(parent, HEADING_TAG);
  if (!(level.flags[h]! & HEADING)) {
    element.text = unitOf(sc, level, h + 1, h + 2, -1);
    return h + 2;
  }
  let p = level.s[h]!;
  while (sc.t.charCodeAt(p) === HASH) p++;
  element.text = unitOf(sc, level, h, h, -1);
  addPiece(sc, element.text, p + 1, level.e[h]!);
  return h + 1;
}

/**
 * The processors that take the rest of the block: OListProcessor and UListProcessor (sane lists,
 * Zulip's 2-space indent) when it starts with an item (`mayList`); BlockQuoteProcessor (Zulip's
 * RE) from its first `>` line, unless only empty `>` lines follow; else ParagraphProcessor.
 */
function restOfBlock(sc: Scan, parent: Element, level: Level, a: number, b: number, state: number, mayList: boolean, nest: boolean): void {
  const kind = mayList ? listItemKind(sc, level, a) : 0;
  if (kind) return list(sc, parent, level, a, b, kind === 1 ? BULLETS : NUMBERS);
  const quote = nest ? findQuote(sc, level, a, b) : b;
  if (quote < b) {
    if (quote > a) parseBlock(sc, parent, level, a, quote, state);
    return blockquote(sc, parent, level, quote, b);
  }
  paragraph(sc, parent, level, a, b, state);
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
