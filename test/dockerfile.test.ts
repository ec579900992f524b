import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * Docker is not available where the tests run: the Dockerfile is read instead, for the promises
 * the docs make about the image (how it starts, runs and is checked).
 */

const ROOT = resolve(import.meta.dirname, '..');
const lines = readFileSync(resolve(ROOT, 'Dockerfile'), 'utf8')
  .replace(/\\\n\s*/g, ' ')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'));
const instructions = lines.map((l) => {
  const [word, ...rest] = l.split(/\s+/);
  return { word: word!.toUpperCase(), args: rest.join(' ') };
});
const all = (word: string) => instructions.filter((i) => i.word === word).map((i) => i.args);

describe('Dockerfile', () => {
  it('builds and runs on an even-numbered (LTS) Node line newer than Node 20', () => {
    const froms = all('FROM');
    expect(froms.length).toBeGreaterThan(0);
    for (const from of froms) {
      const major = Number(/^node:(\d+)/.exec(from)?.[1]);
      expect(major % 2, from).toBe(0);
      expect(major, from).toBeGreaterThan(20);
    }
  });

  it('starts the CLI as PID 1 (exec form) and never the demo by itself', () => {
    expect(JSON.parse(all('ENTRYPOINT').at(-1)!)).toEqual(['node', 'dist/cli.js']);
    expect(all('CMD')).toEqual([]);
    const env = all('ENV').join(' ');
    expect(env).not.toMatch(/\b(DEMO|UPSTREAM_URL|REPLAY_HAR)=/);
  });

  it('checks health through the CLI, which follows the configured port and host', () => {
    const check = all('HEALTHCHECK').at(-1)!;
    const cmd = /\bCMD\s+(\[.*\])$/.exec(check)?.[1];
    expect(JSON.parse(cmd!)).toEqual(['node', 'dist/cli.js', '--healthcheck']);
  });

  it('runs as the unprivileged node user', () => {
    expect(all('USER').at(-1)).toBe('node');
  });
});
