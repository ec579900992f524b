import type { ServerResponse } from 'node:http';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InFlightAnswers, type InFlightAnswer } from '../src/http/in-flight.js';

/**
 * The answers the drain deadline (X9) still has to end: each request is added as it starts
 * and removed when its answer closes, in any order. The server's use of it (503 with the
 * request id at the deadline) is in test/drain.test.ts.
 */

const answer = (n: number) => ({ n }) as unknown as ServerResponse;
const ids = (list: InFlightAnswers) => [...list].map((e) => e.requestId);

describe('InFlightAnswers', () => {
  it('lists what was added and not removed, oldest first, with each request id', () => {
    const list = new InFlightAnswers();
    const a = list.add(answer(1), 'a');
    list.add(answer(2), 'b');
    const c = list.add(answer(3), 'c');
    list.add(answer(4), 'd');
    expect(ids(list)).toEqual(['a', 'b', 'c', 'd']);
    a.remove();
    c.remove();
    expect(ids(list)).toEqual(['b', 'd']);
    expect([...list].map((e) => e.res)).toEqual([answer(2), answer(4)]);
  });

  it('removing an entry twice, or the last one, leaves the rest as they were', () => {
    const list = new InFlightAnswers();
    const a = list.add(answer(1), 'a');
    const b = list.add(answer(2), 'b');
    b.remove();
    b.remove();
    expect(ids(list)).toEqual(['a']);
    a.remove();
    expect(ids(list)).toEqual([]);
    list.add(answer(3), 'c');
    expect(ids(list)).toEqual(['c']);
  });

  it('an entry closed while the list is read (an answer ended by the deadline) is skipped, the rest are all read', () => {
    const list = new InFlightAnswers();
    const entries = ['a', 'b', 'c', 'd'].map((id, i) => list.add(answer(i), id));
    const read: string[] = [];
    for (const e of list) {
      read.push(e.requestId);
      e.remove(); // the one just answered
      if (e.requestId === 'a') entries[2]!.remove(); // and one further on
    }
    expect(read).toEqual(['a', 'b', 'd']);
    expect(ids(list)).toEqual([]);
  });

  it('an entry of one list does not unlink anything from another', () => {
    const one = new InFlightAnswers();
    const other = new InFlightAnswers();
    const a = one.add(answer(1), 'a');
    other.add(answer(2), 'b');
    other.unlink(a);
    expect(ids(one)).toEqual(['a']);
    expect(ids(other)).toEqual(['b']);
  });

  it('any sequence of adds and removes leaves what a plain array would', () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.constant(-1), fc.nat(40)), { maxLength: 200 }), (ops) => {
        const list = new InFlightAnswers();
        const model: Array<{ entry: InFlightAnswer; id: string }> = [];
        const removed: InFlightAnswer[] = [];
        ops.forEach((op, i) => {
          if (op === -1 || model.length === 0) {
            const id = String(i);
            model.push({ entry: list.add(answer(i), id), id });
          } else if (op % 5 === 0 && removed.length > 0) {
            removed[op % removed.length]!.remove(); // a second close changes nothing
          } else {
            const [gone] = model.splice(op % model.length, 1);
            gone!.entry.remove();
            removed.push(gone!.entry);
          }
        });
        expect(ids(list)).toEqual(model.map((m) => m.id));
      }),
    );
  });
});
