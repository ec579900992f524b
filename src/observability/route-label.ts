/**
 * The `method` label of client requests: methods with a label of their own; any other (WebDAV,
 * …) counts as `other`, so the series stay bounded.
 */
export const METHOD_LABELS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** The `status` label: the HTTP status class, or why there was no answer. */
export type StatusLabel = '1xx' | '2xx' | '3xx' | '4xx' | '5xx' | 'error' | 'timeout';

const STATUS_CLASSES: readonly StatusLabel[] = ['1xx', '2xx', '3xx', '4xx', '5xx'];

/** Every value `statusLabel` gives. */
export const STATUS_LABELS: readonly StatusLabel[] = [...STATUS_CLASSES, 'error', 'timeout'];

/** Runs for every client request and upstream exchange: a table lookup, no string built. */
export function statusLabel(outcome: number | 'error' | 'timeout'): StatusLabel {
  if (typeof outcome !== 'number') return outcome;
  return STATUS_CLASSES[Math.floor(outcome / 100) - 1] ?? 'error';
}
