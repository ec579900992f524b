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
  it('builds and runs on an even-numbered (LTS) Node line newer than Node 20, pinned by digest', () => {
    const bases = all('FROM')
      .map((from) => from.split(/\s+/)[0]!)
      .filter((image) => image.startsWith('node:'));
    expect(bases.length).toBeGreaterThan(0);
    for (const image of bases) {
      const major = Number(/^node:(\d+)/.exec(image)?.[1]);
      expect(major % 2, image).toBe(0);
      expect(major, image).toBeGreaterThan(20);
      expect(image, 'a tag moves; a digest does not').toMatch(/^node:[\w.-]+@sha256:[0-9a-f]{64}$/);
    }
    // Every stage stands on the pinned base or an earlier stage: no second, unpinned image.
    const named = new Set<string>();
    for (const from of all('FROM')) {
      const [image, as, name] = from.split(/\s+/);
      expect(image!.startsWith('node:') || named.has(image!), from).toBe(true);
      if (as?.toUpperCase() === 'AS') named.add(name!);
    }
    // How to update it is said beside it.
    expect(readFileSync(resolve(ROOT, 'Dockerfile'), 'utf8')).toMatch(/docker buildx imagetools inspect node:24-slim/);
  });

  it('installs the dependencies once, in the build stage, and the runtime stage has no package manager', () => {
    const runs = all('RUN').join('\n');
    expect(runs.match(/\bnpm (ci|install|i)\b/g)).toEqual(['npm ci']);
    const stages = lines
      .join('\n')
      .split(/^FROM /m)
      .slice(1);
    const runtime = stages.at(-1)!;
    // Production dependencies come from the build stage, pruned there.
    expect(runs).toMatch(/npm prune --omit=dev/);
    expect(runtime).toMatch(/^COPY --from=build \/app\/node_modules /m);
    // No npm, npx or corepack command runs in it, and they are removed from the image.
    const runtimeRuns = runtime.split('\n').filter((l) => /^RUN\b/i.test(l));
    for (const run of runtimeRuns) expect(run).not.toMatch(/(^|[\s;&|])(npm|npx|corepack|yarn) /);
    const removed = runtimeRuns.join(' ');
    for (const tool of ['/usr/local/bin/npm', '/usr/local/bin/npx', '/usr/local/bin/corepack', '/usr/local/lib/node_modules/npm']) {
      expect(removed).toContain(tool);
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
