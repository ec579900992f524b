/**
 * The `narrow` parameter of GET /messages and POST /messages/flags/narrow, for the request
 * changes that rewrite it (M2). Pure.
 */

/** A narrow element as the app sends it (`{"operator":…,"operand":…}`; older clients send pairs). */
export type NarrowElement = { operator?: unknown; operand?: unknown; negated?: unknown } | unknown[];

/** The endpoints whose requests carry a narrow. */
export const NARROWED = ['GET /messages', 'POST /messages/flags/narrow'] as const;

/** Replaces `narrow` with `edit`'s result; false (and nothing changed) when absent, not a JSON list, or unchanged. */
export function editNarrow(params: URLSearchParams, edit: (narrow: NarrowElement[]) => NarrowElement[]): boolean {
  const text = params.get('narrow');
  if (text === null) return false;
  let narrow: unknown;
  try {
    narrow = JSON.parse(text);
  } catch {
    return false; // the upstream words the error
  }
  if (!Array.isArray(narrow)) return false;
  const next = edit(narrow as NarrowElement[]);
  const out = JSON.stringify(next);
  if (out === JSON.stringify(narrow)) return false;
  params.set('narrow', out);
  return true;
}

export const operatorOf = (element: NarrowElement): unknown => (Array.isArray(element) ? element[0] : element.operator);

export function withOperator(element: NarrowElement, operator: string): NarrowElement {
  return Array.isArray(element) ? [operator, ...element.slice(1)] : { ...element, operator };
}
