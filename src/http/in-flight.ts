import type { ServerResponse } from 'node:http';

/** One answer not yet closed: a link of the list, and the handle its request removes itself with. */
export class InFlightAnswer {
  /** @internal */ prev: InFlightAnswer | undefined;
  /** @internal */ next: InFlightAnswer | undefined;
  /** @internal */ list: InFlightAnswers | undefined;

  constructor(
    readonly res: ServerResponse,
    readonly requestId: string,
  ) {}

  /** The answer closed. Removing it twice, or after the list was read, is harmless. */
  remove(): void {
    this.list?.unlink(this);
  }
}

/**
 * The answers not yet closed, with their request ids, for the drain deadline (X9): every
 * request is added as it starts and removed when its answer closes.
 *
 * A doubly linked list through the entries, not a `Set` or `Map` keyed by the response. With
 * the response as the key of a long-lived `Map`, V8's young-generation collections copied and
 * then promoted about 3.9 KB of each request's objects (request, answer, socket state, upstream
 * handler) to the old generation, against 0.1 KB without it, and the scavenges took about a
 * tenth of the pass-through's CPU (measured with B4; commit cfeff98). A `Set` did the
 * same. Linked here, an answer is garbage like any other once it is unlinked.
 */
export class InFlightAnswers implements Iterable<InFlightAnswer> {
  private first: InFlightAnswer | undefined;
  private last: InFlightAnswer | undefined;

  add(res: ServerResponse, requestId: string): InFlightAnswer {
    const entry = new InFlightAnswer(res, requestId);
    entry.list = this;
    entry.prev = this.last;
    if (this.last) this.last.next = entry;
    else this.first = entry;
    this.last = entry;
    return entry;
  }

  /** @internal Called by InFlightAnswer.remove. */
  unlink(entry: InFlightAnswer): void {
    if (entry.list !== this) return;
    if (entry.prev) entry.prev.next = entry.next;
    else this.first = entry.next;
    if (entry.next) entry.next.prev = entry.prev;
    else this.last = entry.prev;
    entry.prev = entry.next = entry.list = undefined;
  }

  /** Oldest first. Entries removed while the iteration is under way are skipped, not lost track of. */
  *[Symbol.iterator](): Iterator<InFlightAnswer> {
    // A copy: answering one entry may close it (and unlink it) before the next is read.
    const entries: InFlightAnswer[] = [];
    for (let e = this.first; e; e = e.next) entries.push(e);
    for (const e of entries) if (e.list === this) yield e;
  }
}
