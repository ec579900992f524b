import { createLogger, type Logger } from '../../src/observability/logger.js';

/** A logger at `level` whose lines (pino's JSON, one a write) are kept in `lines`, for a test to read. */
export function capturedLog(level: string): { lines: string[]; log: Logger } {
  const lines: string[] = [];
  return { lines, log: createLogger(level, { write: (line: string) => lines.push(line) } as never) };
}
