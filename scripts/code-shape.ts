/**
 * The shape of src/: every function's length in lines and its cyclomatic complexity, measured with
 * the TypeScript compiler API. Prints the ten longest and the ten most complex, then checks the
 * limits the code keeps (`npm run lint` runs it, so CI does):
 *
 * - no function over 80 lines, except a declarative table (DECLARATIVE_TABLES, each with its reason);
 * - at most 3 functions over 60 lines;
 * - at most one function with a cyclomatic complexity above 20 (the id state machine).
 *
 *   npm run code-shape               report; exit 1 past the limits
 *   npm run code-shape -- --report   report only, exit 0 whatever it finds
 *   npm run code-shape -- --json     every function, as JSON, for comparisons
 *
 * Length: from the line of the function's first token (its name, or `async`, `export`) to the line
 * of its closing token, both counted; a nested function's lines count in its parent's length too.
 * Complexity: 1, plus one per `if`, `?:`, `case`, loop, `catch`, `&&`, `||`, `??` (and their
 * assignment forms `&&=`, `||=`, `??=`); a nested function's branches count for it alone.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));

export const LIMITS = {
  /** No function longer than this, except a declarative table. */
  maxLines: 80,
  /** Functions longer than this: at most `maxOverSoftLines`. */
  softLines: 60,
  maxOverSoftLines: 3,
  /** Functions with a complexity above this: at most `maxOverComplexity`. */
  complexity: 20,
  maxOverComplexity: 1,
} as const;

/**
 * Functions allowed over `maxLines` because they are a declarative table (a returned literal), by
 * `file:name`, each with the reason.
 */
export const DECLARATIVE_TABLES: Record<string, string> = {
  'src/observability/metrics.ts:createMetrics': 'one returned literal: the declaration of every metric, name, help and labels',
};

export interface FunctionShape {
  file: string;
  line: number;
  name: string;
  lines: number;
  complexity: number;
}

function isFunctionLike(node: ts.Node): node is ts.FunctionLikeDeclaration {
  return (
    ts.isFunctionDeclaration(node) ||
    ts.isMethodDeclaration(node) ||
    ts.isArrowFunction(node) ||
    ts.isFunctionExpression(node) ||
    ts.isConstructorDeclaration(node) ||
    ts.isGetAccessorDeclaration(node) ||
    ts.isSetAccessorDeclaration(node)
  );
}

/** The name a reader would search for: its own, the variable or property it is assigned to, else the call it is passed to. */
function nameOf(node: ts.FunctionLikeDeclaration, source: ts.SourceFile): string {
  if (ts.isConstructorDeclaration(node)) {
    const cls = node.parent;
    return `${ts.isClassLike(cls) && cls.name ? cls.name.text : '<class>'}.constructor`;
  }
  if (node.name) {
    const own = node.name.getText(source);
    const cls = node.parent;
    return ts.isClassLike(cls) && cls.name ? `${cls.name.text}.${own}` : own;
  }
  const parent = node.parent;
  if (ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent)) {
    return parent.name.getText(source);
  }
  if (ts.isBinaryExpression(parent) && parent.operatorToken.kind === ts.SyntaxKind.EqualsToken) return parent.left.getText(source);
  if (ts.isCallExpression(parent) || ts.isNewExpression(parent)) {
    return `<callback of ${parent.expression.getText(source).slice(0, 40)}>`;
  }
  return '<anonymous>';
}

const BRANCHING_OPERATORS = new Set([
  ts.SyntaxKind.AmpersandAmpersandToken,
  ts.SyntaxKind.BarBarToken,
  ts.SyntaxKind.QuestionQuestionToken,
  ts.SyntaxKind.AmpersandAmpersandEqualsToken,
  ts.SyntaxKind.BarBarEqualsToken,
  ts.SyntaxKind.QuestionQuestionEqualsToken,
]);

/** 1 + the decision points of the body, not counting nested functions. */
function complexityOf(fn: ts.FunctionLikeDeclaration): number {
  let count = 1;
  const visit = (node: ts.Node): void => {
    if (node !== fn && isFunctionLike(node)) return;
    switch (node.kind) {
      case ts.SyntaxKind.IfStatement:
      case ts.SyntaxKind.ConditionalExpression:
      case ts.SyntaxKind.CaseClause:
      case ts.SyntaxKind.ForStatement:
      case ts.SyntaxKind.ForInStatement:
      case ts.SyntaxKind.ForOfStatement:
      case ts.SyntaxKind.WhileStatement:
      case ts.SyntaxKind.DoStatement:
      case ts.SyntaxKind.CatchClause:
        count += 1;
        break;
      case ts.SyntaxKind.BinaryExpression:
        if (BRANCHING_OPERATORS.has((node as ts.BinaryExpression).operatorToken.kind)) count += 1;
        break;
    }
    ts.forEachChild(node, visit);
  };
  visit(fn);
  return count;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [path] : [];
  });
}

/** Every function of the .ts files under `dir` (default: src/). */
export function measure(dir = resolve(ROOT, 'src')): FunctionShape[] {
  const shapes: FunctionShape[] = [];
  for (const path of sourceFiles(dir)) {
    const source = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
    const file = relative(ROOT, path);
    const visit = (node: ts.Node): void => {
      if (isFunctionLike(node) && node.body) {
        const start = source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1;
        const end = source.getLineAndCharacterOfPosition(node.getEnd()).line + 1;
        shapes.push({ file, line: start, name: nameOf(node, source), lines: end - start + 1, complexity: complexityOf(node) });
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return shapes;
}

export interface Verdict {
  overMax: FunctionShape[];
  overMaxAllowed: FunctionShape[];
  overSoft: FunctionShape[];
  overComplexity: FunctionShape[];
  failures: string[];
}

export function judge(shapes: readonly FunctionShape[]): Verdict {
  const key = (f: FunctionShape) => `${f.file}:${f.name}`;
  const over = shapes.filter((f) => f.lines > LIMITS.maxLines);
  const overMax = over.filter((f) => !(key(f) in DECLARATIVE_TABLES));
  const overMaxAllowed = over.filter((f) => key(f) in DECLARATIVE_TABLES);
  const overSoft = shapes.filter((f) => f.lines > LIMITS.softLines);
  const overComplexity = shapes.filter((f) => f.complexity > LIMITS.complexity);
  const failures: string[] = [];
  if (overMax.length > 0) failures.push(`${overMax.length} function(s) over ${LIMITS.maxLines} lines that are not a declarative table`);
  if (overSoft.length > LIMITS.maxOverSoftLines) {
    failures.push(`${overSoft.length} functions over ${LIMITS.softLines} lines (at most ${LIMITS.maxOverSoftLines})`);
  }
  if (overComplexity.length > LIMITS.maxOverComplexity) {
    failures.push(`${overComplexity.length} functions over complexity ${LIMITS.complexity} (at most ${LIMITS.maxOverComplexity})`);
  }
  return { overMax, overMaxAllowed, overSoft, overComplexity, failures };
}

const row = (f: FunctionShape) =>
  `  ${String(f.lines).padStart(4)} lines  cc ${String(f.complexity).padStart(3)}  ${f.name}  ${f.file}:${f.line}`;

function report(shapes: FunctionShape[], verdict: Verdict): string {
  const longest = [...shapes].sort((a, b) => b.lines - a.lines || b.complexity - a.complexity).slice(0, 10);
  const complex = [...shapes].sort((a, b) => b.complexity - a.complexity || b.lines - a.lines).slice(0, 10);
  return [
    `${shapes.length} functions in src/`,
    '',
    'Ten longest:',
    ...longest.map(row),
    '',
    'Ten most complex:',
    ...complex.map(row),
    '',
    `Over ${LIMITS.maxLines} lines: ${verdict.overMax.length + verdict.overMaxAllowed.length} (${verdict.overMaxAllowed.length} declarative table(s) allowed: ${verdict.overMaxAllowed.map((f) => f.name).join(', ') || 'none'})`,
    `Over ${LIMITS.softLines} lines: ${verdict.overSoft.length} (limit ${LIMITS.maxOverSoftLines})`,
    `Over complexity ${LIMITS.complexity}: ${verdict.overComplexity.length} (limit ${LIMITS.maxOverComplexity})`,
  ].join('\n');
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const shapes = measure();
  const verdict = judge(shapes);
  if (args.includes('--json')) {
    process.stdout.write(`${JSON.stringify(shapes, null, 2)}\n`);
  } else {
    process.stdout.write(`${report(shapes, verdict)}\n`);
  }
  const enforce = !args.includes('--report');
  if (verdict.failures.length > 0) {
    process.stderr.write(`\ncode-shape: ${verdict.failures.join('; ')}${enforce ? '' : ' (report only)'}\n`);
    if (enforce) process.exitCode = 1;
  }
}
