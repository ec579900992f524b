/**
 * Zulip Markdown, just far enough to tell message text from code: fenced blocks (``` or ~~~,
 * closed by a fence of the same character at least as long, or by the end of the message) and
 * code spans (a run of backticks closed by a run of the same length). Zulip has no indented code
 * blocks. Pure.
 */

const OPENING = /^[ \t>]*(`{3,}|~{3,})/;
const CLOSING = /^[ \t>]*(`{3,}|~{3,})[ \t\r]*$/;

/** Applies `edit` to every stretch of `content` outside code, leaving code exactly as it was. */
export function editOutsideCode(content: string, edit: (text: string) => string): string {
  const lines = content.split('\n');
  const out: string[] = [];
  let prose: string[] = [];
  let fence: string | undefined;
  const flush = () => {
    if (prose.length) out.push(editOutsideSpans(prose.join('\n'), edit));
    prose = [];
  };
  for (const line of lines) {
    if (fence === undefined) {
      const opener = OPENING.exec(line)?.[1];
      if (opener === undefined) {
        prose.push(line);
        continue;
      }
      flush();
      fence = opener;
      out.push(line);
    } else {
      out.push(line);
      const closer = CLOSING.exec(line)?.[1];
      if (closer !== undefined && closer[0] === fence[0] && closer.length >= fence.length) fence = undefined;
    }
  }
  flush();
  return out.join('\n');
}

/** `edit` on the text between code spans; a backtick run with no closing run of its length is text. */
function editOutsideSpans(text: string, edit: (text: string) => string): string {
  let out = '';
  let from = 0;
  let at = 0;
  while (at < text.length) {
    const open = text.indexOf('`', at);
    if (open < 0) break;
    let end = open;
    while (text[end] === '`') end++;
    const run = text.slice(open, end);
    const close = findRun(text, run, end);
    if (close < 0) {
      at = end;
      continue;
    }
    out += edit(text.slice(from, open)) + text.slice(open, close + run.length);
    from = at = close + run.length;
  }
  return out + edit(text.slice(from));
}

/** Where a run of exactly `run` starts at or after `from`, or -1. */
function findRun(text: string, run: string, from: number): number {
  for (let i = text.indexOf(run, from); i >= 0; i = text.indexOf(run, i + 1)) {
    if (text[i - 1] !== '`' && text[i + run.length] !== '`') return i;
    while (text[i + 1] === '`') i++;
  }
  return -1;
}
