/** Pass 5, code spans: BACKTICK_RE within each unit (paragraph, list item, heading). */

import { runEnd } from './fences.js';
import { BACKSLASH, BACKTICK, growRuns, type Scan } from './scan.js';

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
export function codeSpans(sc: Scan, unit: number): void {
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
