import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { configReference, README, withReference } from '../scripts/config-reference.js';

/** The README's configuration reference is the schema's, key for key (the contract: generated from the schema). */
describe('README configuration reference', () => {
  it('matches the schema (run `npm run docs:config` after changing src/config/schema.ts)', () => {
    const readme = readFileSync(README, 'utf8');
    expect(readme).toBe(withReference(readme, configReference()));
  });

  it('describes every key', () => {
    const undescribed = configReference()
      .split('\n')
      .filter((row) => row.endsWith('|  |'));
    expect(undescribed).toEqual([]);
  });
});
