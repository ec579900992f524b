import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, expect } from 'vitest';
import { findSecret } from './secrets.js';
import { capturedLogLines, startedShims } from './shim.js';

/**
 * P13 over the whole suite (a vitest setup file: it runs in every test file's process). After
 * each test and at the end of the file, no test credential may appear, in any spelling, in a log
 * line of a shim started by a test, in a HAR file written under this file's temporary directory
 * (TMPDIR points there, so the recorder tests' files land in it), or in any started shim's
 * /metrics text.
 *
 * Test files may share loaded modules (vitest.config.ts): this file runs again before each one,
 * so what it checks starts empty for each file.
 */

// The system's directory, not the one the file before set (removed at its end).
process.env.ZCS_SYSTEM_TMPDIR ??= tmpdir();
const systemTmp = process.env.ZCS_SYSTEM_TMPDIR;
const root = mkdtempSync(join(systemTmp, 'zcs-secrets-'));
process.env.TMPDIR = root;

function harFiles(dir: string, out: string[] = []): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return out;
  }
  for (const name of names) {
    const path = join(dir, name);
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(path);
    } catch {
      continue;
    }
    if (st.isDirectory()) harFiles(path, out);
    else if (name.endsWith('.har')) out.push(path);
  }
  return out;
}

capturedLogLines.length = 0;
startedShims.length = 0;
let logLinesChecked = 0;
const harChecked = new Map<string, number>();

async function findings(withMetrics: boolean): Promise<string[]> {
  const found: string[] = [];
  // Lines once checked are let go: a file of thousands of requests does not keep them all.
  for (const line of capturedLogLines.splice(0)) {
    const hit = findSecret(line);
    if (hit) found.push(`log line ${logLinesChecked}: ${hit}`);
    logLinesChecked++;
  }
  for (const file of harFiles(root)) {
    let text: string;
    let mtime: number;
    try {
      mtime = statSync(file).mtimeMs;
      if (harChecked.get(file) === mtime) continue;
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    harChecked.set(file, mtime);
    const hit = findSecret(text);
    if (hit) found.push(`HAR ${file.slice(root.length)}: ${hit}`);
  }
  if (withMetrics) {
    for (const [i, shim] of startedShims.entries()) {
      const hit = findSecret(await shim.context.metrics.registry.metrics());
      if (hit) found.push(`metrics of shim ${i}: ${hit}`);
    }
  }
  return found;
}

afterEach(async () => {
  expect(await findings(false), 'credentials in logs or HAR files').toEqual([]);
});

afterAll(async () => {
  try {
    expect(await findings(true), 'credentials in logs, HAR files or metrics').toEqual([]);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
