/**
 * Pass 1, hanging lists (MarkdownListPreprocessor): on the content as sent, before pass 2 (CR and
 * tabs are plain characters).
 */

import { fenceLangEnd, fenceLangStart, isWord, matchFence } from './fences.js';
import { DASH, DOT, Ints, PLUS, type Scan, SPACE, STAR } from './scan.js';

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
export function hangingListBreaks(
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
    codeOpen += fenceLine(sc, raw, start, end, open);
    if (codeOpen === 0 && end > start && nextKind && (!kind || kind !== nextKind)) {
      breaks[rawLineToLine ? rawLineToLine[m + 1]! : m + 1] = 1;
    }
    if (nextEnd === raw.length) return breaks;
    start = nextStart;
    end = nextEnd;
    kind = nextKind;
  }
}

/**
 * The line [start, end) as pass 1's fence tracking sees it: a fence without a lang closing the
 * innermost one open like it, or any other fence opening one. Returns the change in how many
 * open fences are code (a `quote` or `quoted` fence is not).
 */
function fenceLine(sc: Scan, raw: string, start: number, end: number, open: Ints): number {
  const fence = matchFence(sc, raw, start, end);
  if (!fence) return 0;
  const char = raw.charCodeAt(start);
  const top = open.n - 3;
  if (fenceLangStart === fenceLangEnd && top >= 0 && open.a[top] === char && open.a[top + 1] === fence) {
    open.n -= 3;
    return -open.a[top + 2]!;
  }
  const code =
    isWord(raw, fenceLangStart, fenceLangEnd, 'quote', false) || isWord(raw, fenceLangStart, fenceLangEnd, 'quoted', false) ? 0 : 1;
  open.push(char);
  open.push(fence);
  open.push(code);
  return code;
}
