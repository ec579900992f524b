import { proseRanges } from '../../src/changes/markdown-text.js';

/**
 * Messages in the shapes Zulip's Markdown reads differently, each with where it reads the
 * `@**channel**` in it: `prose` where the server renders the mention (inside a quote block, a
 * silent one, still rewritten), `code` where it shows it as code or not at all. Each reading was
 * checked against Zulip's own pipeline (fenced_code.py, its block processors and BACKTICK_RE on
 * Python-Markdown 3.x). Used by the scanner's tests and by the app's content changes' (M6).
 */
export const MARKDOWN_SHAPES: ReadonlyArray<readonly [what: string, content: string, reading: 'prose' | 'code']> = [
  ['plain text', '@**channel** lunch', 'prose'],
  ['inside `x`', 'write `@**channel**` to ping', 'code'],
  ['inside ``x`` holding a backtick', 'write ``a ` @**channel**`` here', 'code'],
  ['inside a ``` fence', '```\n@**channel**\n```', 'code'],
  ['inside a ~~~ fence', '~~~\n@**channel**\n~~~', 'code'],
  ['inside a longer fence holding ```', '`````\n```\n@**channel**\n```\n`````', 'code'],
  ['after a closed fence', '```\ncode\n```\n@**channel**', 'prose'],
  ['in an unclosed fence, to the end', '```\nnever closed\n\n@**channel**', 'code'],
  ['inside ```quote', '```quote\n@**channel**\n```', 'prose'],
  ['inside ```quoted', '```quoted\n@**channel**\n```', 'prose'],
  ['inside ```spoiler with a title', '```spoiler Lunch\n@**channel** pizza\n```', 'prose'],
  ['inside ```Quote (any case)', '```Quote\n@**channel**\n```', 'prose'],
  ['inside ```SPOILER x (any case)', '```SPOILER x\n@**channel**\n```', 'prose'],
  ['inside ```math', '```math\n@**channel**\n```', 'code'],
  ['inside ```latex', '```latex\n@**channel**\n```', 'code'],
  ['in a fence inside a quote block', '~~~quote\n```\n@**channel**\n```\n~~~', 'code'],
  ['after ``` inside ```quote (it closes the quote)', '```quote\n```\n@**channel**', 'prose'],
  ['after a stray backtick in an earlier paragraph', 'press ` here\n\n@**channel** see `x`', 'prose'],
  ['after a stray backtick in an earlier list item', '- press ` here\n- @**channel** see `x`', 'prose'],
  ['between escaped backticks', 'a \\`@**channel**\\` b', 'prose'],
  ['after an escaped backslash, a real backtick', 'a \\\\`@**channel**` b', 'code'],
  ['after three backslashes, an escaped backtick', 'a \\\\\\`@**channel**` b', 'prose'],
  ['after a one-line ```x``` (no fence: a code span)', '```x``` @**channel**', 'prose'],
  ['after an unclosed backtick on the same line', 'an unclosed ` then @**channel**', 'prose'],
  ['in a `` run closed only by a longer run', '``a @**channel** ```', 'prose'],
  ['after a fence closed with trailing spaces', '```\ncode\n```   \n@**channel**', 'prose'],
  ['in a ~~~ fence that ``` does not close', '~~~\ncode\n```\n@**channel**', 'code'],
  ['in a `` run that backtracks to one closed by `', '`` @**channel** `', 'code'],
  ["in a spoiler's header", '```spoiler @**channel**\nx\n```', 'prose'],
  ["in a quote block's header (not rendered)", '```quote @**channel**\nx\n```', 'code'],
  ['in the header of an empty spoiler (not rendered)', '```spoiler @**channel**\n```\nx', 'code'],
  ['in the header of an unclosed spoiler', '```spoiler @**channel**', 'prose'],
  ['in a code span across an empty code block', '`x\n```\n```\n@**channel**`', 'code'],
  ['in a 4-space indented code block', 'x\n\n    @**channel**', 'code'],
  ['after an indented fence (a code block, then text)', '    ```\n@**channel**', 'prose'],
  ["in a list item's indented paragraph", '- a\n\n    @**channel**', 'prose'],
  ["in a list item's indented code block", '- a\n\n      @**channel**', 'code'],
  ['after a paragraph cut by a > line', 'para `x\n> @**channel** ` y', 'prose'],
  ["in a span across a paragraph's lines", 'a `b\nc @**channel**` d', 'code'],
  ["in a span across a list item's 4-space continuation", '- a `x\n    - @**channel** ` y', 'code'],
  ['in a spoiler, where a list item does not cut the paragraph', '```spoiler\ntext `x\n- @**channel** ` y\n```', 'code'],
  ['in a quote block, where it does', '```quote\ntext `x\n- @**channel** ` y\n```', 'prose'],
  ['after a heading', '# h `x\n@**channel** `', 'prose'],
  ['after a rule', 'a `x\n---\n@**channel** `', 'prose'],
  ['in a fence of CR LF lines', 'a\r\n```\r\n@**channel**\r\n```', 'code'],
  ['after a tab (4 columns: code)', '\t@**channel**', 'code'],
  ['in a list after 10. (pass 1 sees one digit only)', '- a\n10. b `x\n11. @**channel** `', 'code'],
  ['in a `>` quote', '> @**channel**', 'prose'],
];

/** What of `content` lies outside prose (code and fences), each prose stretch standing as `|`. */
export function outsideProse(content: string): string {
  let kept = '';
  let from = 0;
  for (const [start, end] of proseRanges(content)) {
    kept += `${content.slice(from, start)}|`;
    from = end;
  }
  return kept + content.slice(from);
}
