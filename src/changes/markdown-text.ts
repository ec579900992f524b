/**
 * Zulip Markdown, just far enough to tell message text from code, by the rules of Zulip's own
 * fenced-block preprocessor (zerver/lib/markdown/fenced_code.py): a fence (``` or ~~~, three or
 * more) opens a block only at the start of a line; the block ends at a line that is exactly the
 * same fence (trailing spaces aside), or at the end of the message. A `quote`, `quoted` or
 * `spoiler` block holds Markdown (its mentions notify; blocks nest inside it); any other block
 * is code. Code spans are a run of backticks closed by a run of the same length. Zulip has no
 * indented code blocks. Pure.
 */

const OPENING = /^(`{3,}|~{3,})[ ]*\{?\.?([a-zA-Z0-9_+\-./#]*)/;
const MARKDOWN_BLOCKS: ReadonlySet<string> = new Set(['quote', 'quoted', 'spoiler']);

/** Applies `edit` to every stretch of `content` outside code, leaving code exactly as it was. */
export function editOutsideCode(content: string, edit: (text: string) => string): string {
  const out: string[] = [];
  let prose: string[] = [];
  /** The blocks open around the current line, innermost last. */
  const open: Array<{ fence: string; code: boolean }> = [];
  const flush = () => {
    if (prose.length) out.push(editOutsideSpans(prose.join('\n'), edit));
    prose = [];
  };
  for (const line of content.split('\n')) {
    const inner = open.at(-1);
    if (inner && line.trimEnd() === inner.fence) {
      flush();
      out.push(line);
      open.pop();
    } else if (inner?.code) {
      out.push(line);
    } else {
      const opener = OPENING.exec(line);
      if (!opener) {
        prose.push(line);
        continue;
      }
      flush();
      out.push(line);
      open.push({ fence: opener[1]!, code: !MARKDOWN_BLOCKS.has(opener[2]!) });
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
