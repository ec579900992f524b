import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { configSchema, usage } from '../src/config/index.js';
import { ROOT } from './support/cli-run.js';

/**
 * What an operator reads (configuration errors, start-up warnings, `--check`, `--help`, log
 * lines, the configuration reference written from the schema's descriptions) says things in
 * words. A contract rule code (S1, X2, P9: docs/behaviour.md) means nothing to an operator on
 * its own: it may follow an explanation, in brackets, for looking the rule up, and nowhere else.
 */

/** A rule code of docs/behaviour.md's families (B: the benchmarks of bench/RESULTS.md). */
const CODE = /\b[BEHPRSTUVWX]\d{1,2}[a-z]?\b/;
/** Where a code may stand: a bracket of codes alone, `(X3)` or `(P5, P6)`, after some words. */
const BRACKETED = /\s*\((?:[BEHPRSTUVWX]\d{1,2}[a-z]?)(?:\s*(?:,|and|–|-)\s*[BEHPRSTUVWX]\d{1,2}[a-z]?)*\)/g;
/** Fewer words than this once the codes are gone: the code was the explanation. */
const MIN_WORDS = 4;

/** Why a text fails the rule, or undefined when it keeps it. */
function bareRuleCode(text: string): string | undefined {
  if (!CODE.test(text)) return undefined;
  const without = text.replace(BRACKETED, '');
  const left = CODE.exec(without);
  if (left) return `rule code ${left[0]} outside a bracket of its own after the explanation`;
  const words = without.split(/\s+/).filter((w) => /[a-z]{2,}/i.test(w)).length;
  if (words < MIN_WORDS) return `only ${words} words beside the rule code`;
  if (/^\s*\([BEHPRSTUVWX]\d/.test(text)) return 'the rule code comes before the explanation';
  return undefined;
}

/** Every string literal and piece of template text in a TypeScript file, with its line. */
function stringsOf(file: string): Array<{ line: number; text: string }> {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const out: Array<{ line: number; text: string }> = [];
  const visit = (node: ts.Node) => {
    if (
      ts.isStringLiteral(node) ||
      ts.isNoSubstitutionTemplateLiteral(node) ||
      ts.isTemplateHead(node) ||
      ts.isTemplateMiddle(node) ||
      ts.isTemplateTail(node)
    ) {
      out.push({ line: source.getLineAndCharacterOfPosition(node.getStart()).line + 1, text: node.text });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? tsFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

/** Every source file but presence's (its messages are its own). Comments are not scanned. */
const SCANNED = tsFiles(join(ROOT, 'src')).filter((f) => !relative(ROOT, f).startsWith(join('src', 'presence')));

describe('rule codes in what an operator reads', () => {
  it('the check itself: a bracketed code after an explanation passes; a code alone, first or as a prefix does not', () => {
    expect(bareRuleCode('How long a looked-up user list is reused (U2).')).toBeUndefined();
    expect(bareRuleCode('Admit only these Host names; any other gets a 400 (X2). Empty: any.')).toBeUndefined();
    expect(bareRuleCode('ids survive a restart of the shim (P5, P6)')).toBeUndefined();
    expect(bareRuleCode('listen port; 0 picks a free one')).toBeUndefined();
    expect(bareRuleCode('X2: bytes for shared presence snapshots.')).toMatch(/outside a bracket/);
    expect(bareRuleCode('passed-through requests (X11: apart, so clients cannot take them)')).toMatch(/outside a bracket/);
    expect(bareRuleCode('needs Redis (S1)')).toMatch(/only 2 words/);
    expect(bareRuleCode('(S1)')).toMatch(/only 0 words/);
    expect(bareRuleCode('see S1')).toMatch(/outside a bracket/);
    expect(bareRuleCode('(S1) replicas share their state through Redis')).toMatch(/before the explanation/);
  });

  it('--help says everything in words', () => {
    for (const line of usage().split('\n')) expect(bareRuleCode(line), line).toBeUndefined();
  });

  it("the configuration schema's descriptions (the README's configuration reference) say it in words", () => {
    const descriptions: Array<[string, string]> = [];
    const walk = (s: Record<string, unknown>, at: string) => {
      if (typeof s.description === 'string') descriptions.push([at || 'config', s.description]);
      for (const [k, v] of Object.entries((s.properties as Record<string, Record<string, unknown>>) ?? {})) walk(v, at ? `${at}.${k}` : k);
    };
    walk(z.toJSONSchema(configSchema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>, '');
    expect(descriptions.length).toBeGreaterThan(30);
    for (const [key, text] of descriptions) expect(bareRuleCode(text), `${key}: ${text}`).toBeUndefined();
  });

  it('no string literal in src/ (presence/ aside) leaves a rule code as its only explanation', () => {
    expect(SCANNED.length).toBeGreaterThan(30);
    const found = SCANNED.flatMap((file) =>
      stringsOf(file).flatMap(({ line, text }) => {
        const why = bareRuleCode(text);
        return why ? [`${relative(ROOT, file)}:${line}: ${why}: ${JSON.stringify(text)}`] : [];
      }),
    );
    expect(found).toEqual([]);
  });
});
