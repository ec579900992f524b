/**
 * X9: the signals a serving shim answers, taken from the first moment it is asked to serve:
 * SIGTERM and SIGINT drain, SIGHUP reloads. One that arrives before the shim can act on it (its
 * code still loading, its listener not yet open) is held and handed over once it can, so none
 * ends the process by the signal's default action: a `systemctl reload` racing a start would
 * otherwise stop the shim with a status `Restart=on-failure` does not restart.
 */

export const SERVING_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;
export type ServingSignal = (typeof SERVING_SIGNALS)[number];

export class HeldSignals {
  private readonly held: ServingSignal[] = [];
  private handler: ((signal: ServingSignal) => void) | undefined;
  private readonly take = (signal: ServingSignal) => {
    if (this.handler) this.handler(signal);
    // One reload asked twice before the shim is up is one reload.
    else if (!this.held.includes(signal)) this.held.push(signal);
  };

  constructor() {
    for (const signal of SERVING_SIGNALS) process.on(signal, this.take);
  }

  /** Signals held so far, in the order they came. */
  get pending(): readonly ServingSignal[] {
    return this.held;
  }

  /** From now on signals go to `handler`; those held go first, in order. */
  handTo(handler: (signal: ServingSignal) => void): void {
    this.handler = handler;
    for (const signal of this.held.splice(0)) handler(signal);
  }

  /** No longer taken: the process's listeners are removed. */
  release(): void {
    for (const signal of SERVING_SIGNALS) process.off(signal, this.take);
    this.handler = undefined;
  }
}
