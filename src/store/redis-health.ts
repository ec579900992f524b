import type { Logger } from '../observability/logger.js';
import { STORE_AWAY_PRESENCE } from '../observability/store-away.js';

/**
 * Tells the operator when the shared store goes away and comes back: one line when it fails,
 * then at most one a minute while it stays down (not one per request), and one when it is back.
 * Every failed operation is counted (`store_errors_total`); reconnect attempts are not.
 */
export class StoreHealth {
  private failing = false;
  private lastLineAt = 0;
  private sinceLine = 0;
  private sinceFailing = 0;

  constructor(
    private readonly log: Logger,
    /** host:port of the store, never its URL (which may carry a password). */
    private readonly where: string,
    private readonly errors: { inc(): void } | undefined,
    private readonly everyMs = 60_000,
    private readonly clock: () => number = Date.now,
  ) {}

  /** `count` store operations failed (0: the connection reported an error, not counted). */
  failed(err: unknown, count = 1): void {
    for (let i = 0; i < count; i++) this.errors?.inc();
    this.sinceLine++;
    this.sinceFailing++;
    const now = this.clock();
    if (this.failing && now - this.lastLineAt < this.everyMs) return;
    const reason = err instanceof Error ? err.message : String(err);
    if (this.failing) {
      this.log.warn({ store: this.where, reason, errors: this.sinceLine }, `Redis store still unavailable: ${STORE_AWAY_PRESENCE}`);
    } else {
      this.log.warn({ store: this.where, reason }, `Redis store unavailable: ${STORE_AWAY_PRESENCE}`);
    }
    this.failing = true;
    this.lastLineAt = now;
    this.sinceLine = 0;
  }

  /** A store operation succeeded. */
  ok(): void {
    if (!this.failing) return;
    this.failing = false;
    this.log.info({ store: this.where, errors: this.sinceFailing }, 'Redis store reachable again: presence ids go on from where they were');
    this.sinceFailing = 0;
  }
}
