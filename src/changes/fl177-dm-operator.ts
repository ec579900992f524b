import { narrowLinkEdits } from './content.js';
import { editNarrow, NARROWED, operandOf, operatorOf, withOperand, withOperator } from './narrow.js';
import type { ApiChange } from './types.js';

const RENAMED: Readonly<Record<string, string>> = { dm: 'pm-with', 'dm-including': 'group-pm-with' };

/** `is:dm` is `is:private` below 177. */
const IS_RENAMED: Readonly<Record<string, string>> = { dm: 'private' };

/**
 * In a link, the operand of a direct-message narrow ends `-dm` (two people) where an older web
 * app writes `-pm` (the app wrote `pm-with/1,2-pm` itself below 177; `-group` is the same in both).
 */
function linkOperand(operator: string, operand: string): string | undefined {
  if (operator === 'is') return IS_RENAMED[operand];
  if (operator === 'dm' && operand.endsWith('-dm')) return `${operand.slice(0, -3)}-pm`;
  return undefined;
}

/**
 * Feature level 177 (Zulip 7.0): the narrow operators `dm` and `dm-including` (before: `pm-with`,
 * `group-pm-with`) and `is:dm` (before: `is:private`), in narrows and in the narrow links the app
 * writes into messages (M6), as the app itself wrote them below 177 (resolveApiNarrowForServer).
 */
export const dmOperator: ApiChange = {
  featureLevel: 177,
  feature: 'narrow_dm_operator',
  request: {
    endpoints: NARROWED,
    apply: (params) =>
      editNarrow(params, (narrow) =>
        narrow.map((element) => {
          const operator = String(operatorOf(element));
          const old = RENAMED[operator];
          if (old !== undefined) return withOperator(element, old);
          const operand = operator === 'is' ? IS_RENAMED[String(operandOf(element))] : undefined;
          return operand === undefined ? element : withOperand(element, operand);
        }),
      ),
  },
  content: {
    edits: (content, site) => narrowLinkEdits(content, site, RENAMED, linkOperand),
  },
};
