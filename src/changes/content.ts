import type { Content, Site, TextEdit } from './types.js';

/**
 * M6: finding what Zulip's Markdown interprets in a message's prose (the ranges outside code
 * that changes/markdown-text.ts gives), for the content changes: mentions and narrow links.
 * Every function here is pure and linear in the content's length.
 */

/** Each match of `pattern` (a global RegExp) that lies wholly inside one prose range, with where that range ends. */
export function* proseMatches(content: Content, pattern: RegExp): Generator<[RegExpExecArray, number]> {
  for (const [start, end] of content.prose) {
    const text = content.text.slice(start, end);
    pattern.lastIndex = 0;
    for (let m = pattern.exec(text); m !== null; m = pattern.exec(text)) {
      m.index += start;
      yield [m, end];
    }
  }
}

/**
 * A mention of `name` (`@**name**`, and the silent `@_**name**` when `silentToo`) in prose:
 * the edits that rename it `to`, only the name's own characters replaced.
 */
export function mentionEdits(content: Content, name: string, to: string): TextEdit[] {
  const edits: TextEdit[] = [];
  for (const [m] of proseMatches(content, new RegExp(`@_?\\*\\*${name}\\*\\*`, 'g'))) {
    const start = m.index + m[0].indexOf('**') + 2;
    edits.push({ start, end: start + name.length, text: to });
  }
  return edits;
}

/** Whether prose holds a live (notifying) mention `@**name**`. */
export function hasLiveMention(content: Content, name: string): boolean {
  return !proseMatches(content, new RegExp(`@\\*\\*${name}\\*\\*`, 'g')).next().done;
}

/**
 * Characters that end a narrow link's path: Zulip's hash encoding writes none of them (it writes
 * `.`, `%`, `(` and `)` as `.2E`, `.`, `.28`, `.29`, and encodes the rest as a URL component).
 */
const LINK_END = /[\s()[\]<>"'`#]/;
/** What may stand before an absolute link (an autolink or a Markdown link's target). */
const BEFORE_URL = /[\s(<[]/;

/**
 * The narrow links of the realm in prose: relative ones as a Markdown link's target
 * (`](#narrow/…`) and absolute ones on the realm's own URL (`https://chat.example.com/#narrow/…`,
 * the host compared case-insensitively), never links to other sites. Yields where each link's
 * path after `#narrow/` starts and ends (within its prose range).
 */
function* narrowLinks(content: Content, site: Site): Generator<{ start: number; end: number }> {
  const text = content.text;
  const own = site.realmUrl === undefined ? undefined : `${site.realmUrl}/`;
  for (const [m, proseEnd] of proseMatches(content, /#narrow\//g)) {
    const at = m.index;
    const relative = text.startsWith('](', at - 2);
    const absolute =
      own !== undefined &&
      text.slice(at - own.length, at).toLowerCase() === own &&
      (at === own.length || BEFORE_URL.test(text[at - own.length - 1]!));
    if (!relative && !absolute) continue;
    const start = at + m[0].length;
    let end = start;
    // A link ends where prose does: what follows (a code span's backtick) is not its.
    while (end < proseEnd && !LINK_END.test(text[end]!)) end++;
    yield { start, end };
  }
}

/**
 * The edits that rename the operators of the realm's narrow links in prose (`channel/5-general`
 * → `stream/5-general`): the operators are the path's even segments (a leading `-` negates),
 * operands are left alone unless `operands` gives one anew for its operator.
 */
export function narrowLinkEdits(
  content: Content,
  site: Site,
  renamed: Readonly<Record<string, string>>,
  operands?: (operator: string, operand: string) => string | undefined,
): TextEdit[] {
  const edits: TextEdit[] = [];
  for (const link of narrowLinks(content, site)) {
    let at = link.start;
    let operator = true;
    let name = '';
    while (at < link.end) {
      let next = content.text.indexOf('/', at);
      if (next < 0 || next > link.end) next = link.end;
      if (operator) {
        const negated = content.text[at] === '-' ? 1 : 0;
        name = content.text.slice(at + negated, next);
        const to = Object.hasOwn(renamed, name) ? renamed[name] : undefined;
        if (to !== undefined) edits.push({ start: at + negated, end: next, text: to });
      } else {
        const to = operands?.(name, content.text.slice(at, next));
        if (to !== undefined) edits.push({ start: at, end: next, text: to });
      }
      operator = !operator;
      at = next + 1;
    }
  }
  return edits;
}

/** `text` with the edits applied (in order, not overlapping). */
export function applyEdits(text: string, edits: readonly TextEdit[]): string {
  let out = '';
  let from = 0;
  for (const e of edits) {
    out += text.slice(from, e.start) + e.text;
    from = e.end;
  }
  return out + text.slice(from);
}
