import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { BUILD_DIR_ENV, buildChildScripts, ROOT } from './build.js';

/**
 * Once per test run: bundles the scripts tests start as child processes (test/support/build.ts)
 * into a directory of this run's own under node_modules/.cache, so child processes start on plain
 * node. Rebuilt before each watch-mode rerun, removed at the end.
 */
export default async function setup(project: TestProject): Promise<() => void> {
  const parent = join(ROOT, 'node_modules', '.cache', 'zcs-built');
  mkdirSync(parent, { recursive: true });
  const dir = mkdtempSync(join(parent, 'run-'));
  await buildChildScripts(dir);
  process.env[BUILD_DIR_ENV] = dir;
  project.onTestsRerun(() => buildChildScripts(dir));
  return () => rmSync(dir, { recursive: true, force: true });
}
