/**
 * Pass 2, whitespace (NormalizeWhitespace), done first here: its offsets are the ones the later
 * passes work in.
 */

import { CR, ETX, LF, SPACE, STX, TAB } from './scan.js';

/**
 * NormalizeWhitespace: STX and ETX dropped, CR LF and CR as LF, tabs to the next multiple of 4
 * columns. `rawLineToLine[m]` is the line of `t` where the content's m-th LF-separated line
 * starts (pass 1 splits the content at LF only); null when they are the same.
 */
export function normalize(raw: string): { t: string; origin: Int32Array | null; rawLineToLine: Int32Array | null } {
  if (!needsNormalizing(raw)) return { t: raw, origin: null, rawLineToLine: null };
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
    } else if (!isLowSurrogateOfPair(raw, i, c)) {
      // Python counts code points: the low half of a surrogate pair takes no column.
      column++;
    }
  }
  origin[o] = n;
  // Lone surrogates come out as U+FFFD: the same length, and nothing Markdown reads.
  const t = new TextDecoder('utf-16le').decode(codes.subarray(0, o));
  return { t, origin: origin.subarray(0, o + 1), rawLineToLine: raw.includes('\r') ? Int32Array.from(firstLines) : null };
}

/** Tabs, CRs and placeholder delimiters: what pass 2 changes; without them the text is the content. */
function needsNormalizing(raw: string): boolean {
  return raw.includes('\t') || raw.includes('\r') || raw.includes(STX) || raw.includes(ETX);
}

/** Is c, at i, the low half of a surrogate pair? */
function isLowSurrogateOfPair(raw: string, i: number, c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff && i > 0 && (raw.charCodeAt(i - 1) & 0xfc00) === 0xd800;
}

/** Where each line of `t` starts, and one past the end (a line ends one before the next starts). */
export function lineStarts(t: string): Int32Array {
  let count = 1;
  for (let i = t.indexOf('\n'); i !== -1; i = t.indexOf('\n', i + 1)) count++;
  const starts = new Int32Array(count + 1);
  let k = 1;
  for (let i = t.indexOf('\n'); i !== -1; i = t.indexOf('\n', i + 1)) starts[k++] = i + 1;
  starts[count] = t.length + 1;
  return starts;
}
