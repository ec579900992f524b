import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { judge, LIMITS, measure, type FunctionShape } from '../scripts/code-shape.js';

/** scripts/code-shape.ts: what it measures, and what it holds against the limits. */
describe('the code-shape measurement', () => {
  const dir = mkdtempSync(join(tmpdir(), 'code-shape-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('counts lines from the first token to the closing one, and one branch per decision, nested functions apart', () => {
    writeFileSync(
      join(dir, 'a.ts'),
      [
        'export function decide(a: number, b?: string): string {',
        '  if (a > 1 && b) return b;',
        '  const inner = (x: number) => (x > 0 ? x : -x);',
        '  for (const c of [1, 2]) a += inner(c) ?? 0;',
        "  switch (a) { case 1: return 'one'; case 2: return 'two'; default: return 'many'; }",
        '}',
        'class K { run(): void { try { decide(1); } catch { /* */ } } }',
      ].join('\n'),
    );
    const shapes = measure(dir);
    const byName = Object.fromEntries(shapes.map((f) => [f.name, [f.lines, f.complexity]]));
    // decide: 1 + if + && + for + ?? + 2 cases = 7; inner: 1 + ?: = 2; K.run: 1 + catch = 2.
    expect(byName).toEqual({ decide: [6, 7], inner: [1, 2], 'K.run': [1, 2] });
  });

  it('fails past each limit, and lets a declarative table through', () => {
    const shape = (name: string, lines: number, complexity = 1, file = 'src/x.ts'): FunctionShape => ({
      file,
      line: 1,
      name,
      lines,
      complexity,
    });
    expect(judge([shape('a', 70), shape('b', 70), shape('c', 70), shape('d', 20, 21)]).failures).toEqual([]);
    expect(judge([shape('a', LIMITS.maxLines + 1)]).failures).toHaveLength(1);
    expect(judge([shape('createMetrics', 190, 1, 'src/observability/metrics.ts')]).overMax).toEqual([]);
    expect(judge([shape('a', 61), shape('b', 61), shape('c', 61), shape('d', 61)]).failures).toHaveLength(1);
    expect(judge([shape('a', 10, 21), shape('b', 10, 21)]).failures).toHaveLength(1);
  });
});
