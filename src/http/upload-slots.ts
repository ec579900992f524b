import { ShimError } from './errors.js';

/**
 * X11: passed-through uploads in flight per client address (as nginx's `limit_conn`, whose
 * refusal is a 503 too). An upload holds an upstream connection of the pass-through's pool for
 * as long as its body takes to arrive; with no bound, clients at one address dripping their
 * bodies could take the whole pool and keep every other client's pass-through waiting. An
 * upload counts from the moment it is passed on until its body has all arrived (or its answer
 * closed); a body that has already arrived when the request is passed on never counts.
 */

/** Seconds a refused client is asked to wait. */
const RETRY_AFTER_SECONDS = 5;

export class TooManyUploadsError extends ShimError {
  constructor(limit: number) {
    super(
      503,
      'UPSTREAM_UNAVAILABLE',
      `Too many uploads from this address at once (at most ${limit} whose bodies are still arriving); try again`,
      RETRY_AFTER_SECONDS,
    );
  }
}

export class UploadSlots {
  /** Uploads in flight per address; an address leaves the map when its last one ends. */
  private readonly inFlight = new Map<string, number>();

  constructor(
    /** At most this many per address. */
    public perAddress: number,
  ) {}

  /** One more upload from `address`, unless it has `perAddress` already. */
  take(address: string): boolean {
    const n = this.inFlight.get(address) ?? 0;
    if (n >= this.perAddress) return false;
    this.inFlight.set(address, n + 1);
    return true;
  }

  /** An upload taken by `take` ended (its body arrived, or its answer closed). Call once per take. */
  release(address: string): void {
    const n = this.inFlight.get(address) ?? 0;
    if (n <= 1) this.inFlight.delete(address);
    else this.inFlight.set(address, n - 1);
  }

  /** Addresses with an upload in flight (for tests and metrics). */
  addresses(): number {
    return this.inFlight.size;
  }
}
