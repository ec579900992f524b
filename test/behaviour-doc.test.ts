import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

/** Every rule id the code and the docs cite is stated in docs/behaviour.md, so a reader can look it up. */

const ROOT = resolve(import.meta.dirname, '..');
const RULE_ID = /\b(P1[0-5]|P[1-9]|U[1-5]|R[12]|T[12]|H[12]|S[1-3]|E[1-4]|X1[0-5]|X[1-9]|V[1-5]|W[12]|M[1-7])\b/g;

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]));
}

describe('docs/behaviour.md', () => {
  it('states every rule id cited in src/, the README, SECURITY.md and docs/', () => {
    const citing = [...files(join(ROOT, 'src')), join(ROOT, 'README.md'), join(ROOT, 'SECURITY.md'), ...files(join(ROOT, 'docs'))];
    const cited = new Set(citing.flatMap((f) => readFileSync(f, 'utf8').match(RULE_ID) ?? []));
    const doc = readFileSync(join(ROOT, 'docs', 'behaviour.md'), 'utf8');
    const stated = new Set([...doc.matchAll(/^- \*\*([A-Z]\d+)\./gm)].map((m) => m[1]));
    expect([...cited].filter((id) => !stated.has(id)).sort()).toEqual([]);
    expect(cited.size).toBeGreaterThan(30);
  });
});

describe('bench/README.md', () => {
  it('defines every benchmark id the code, the docs and the results cite (B1–B8), each with its run and target', () => {
    const citing = [
      ...files(join(ROOT, 'src')),
      ...files(join(ROOT, 'bench')).filter((f) => /\.(ts|md)$/.test(f)),
      join(ROOT, 'README.md'),
      ...files(join(ROOT, 'docs')),
    ];
    const cited = new Set(citing.flatMap((f) => readFileSync(f, 'utf8').match(/\bB[1-9]\b/g) ?? []));
    const doc = readFileSync(join(ROOT, 'bench', 'README.md'), 'utf8');
    const rows = [...doc.matchAll(/^\| (B\d) +\| [^|]+ \| ([^|]+) \| ([^|]+) \|$/gm)];
    const defined = new Set(rows.map((m) => m[1]));
    expect([...cited].filter((id) => !defined.has(id)).sort()).toEqual([]);
    expect([...defined].sort()).toEqual(['B1', 'B2', 'B3', 'B4', 'B5', 'B6', 'B7', 'B8']);
    for (const [, , run, target] of rows) {
      expect(run).toMatch(/npm run bench/);
      expect(target!.trim().length).toBeGreaterThan(3);
    }
  });
});
