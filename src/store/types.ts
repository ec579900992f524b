/**
 * The shared store cannot answer now (unreachable, timed out, too contended). Thrown fast so
 * that a caller can fall back to the upstream's own answer instead of waiting (S1).
 */
export class StoreUnavailableError extends Error {
  override name = 'StoreUnavailableError';

  constructor(
    message: string,
    readonly reason: 'unreachable' | 'contention',
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
