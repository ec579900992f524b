import type { RequestParams } from './types.js';

/**
 * The `narrow` parameter of GET /messages and POST /messages/flags/narrow, for the request
 * changes that rewrite it (M2). Pure.
 */

/** A narrow element as the app sends it (`{"operator":…,"operand":…}`; older clients send pairs). */
export type NarrowElement = { operator?: unknown; operand?: unknown; negated?: unknown } | unknown[];

/** The endpoints whose requests carry a narrow. */
export const NARROWED = ['GET /messages', 'POST /messages/flags/narrow'] as const;

/**
 * Replaces each `narrow` with `edit`'s result; false (and nothing changed) where one is not a
 * JSON list, cannot be written again (nested too deep), or is unchanged: the upstream then reads
 * and answers it as it came (E1).
 */
export function editNarrow(params: RequestParams, edit: (narrow: NarrowElement[]) => NarrowElement[]): boolean {
  return params.edit('narrow', (text) => {
    try {
      const narrow: unknown = JSON.parse(text);
      if (!Array.isArray(narrow)) return text;
      const next = edit(narrow as NarrowElement[]);
      return next.length === narrow.length && next.every((e, i) => e === narrow[i]) ? text : JSON.stringify(next);
    } catch {
      return text; // the upstream words the error
    }
  });
}

export const operatorOf = (element: NarrowElement): unknown => (Array.isArray(element) ? element[0] : element.operator);

export function withOperator(element: NarrowElement, operator: string): NarrowElement {
  return Array.isArray(element) ? [operator, ...element.slice(1)] : { ...element, operator };
}

export const operandOf = (element: NarrowElement): unknown => (Array.isArray(element) ? element[1] : element.operand);

export function withOperand(element: NarrowElement, operand: string): NarrowElement {
  return Array.isArray(element) ? [element[0], operand, ...element.slice(2)] : { ...element, operand };
}
