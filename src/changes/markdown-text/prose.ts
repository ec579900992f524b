/** The prose: what no mark covers, in the content's offsets. */

import type { Ints, ProseRange, Scan } from './scan.js';

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

export function complement(sc: Scan, contentLength: number): Array<ProseRange> {
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
