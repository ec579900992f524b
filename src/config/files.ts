import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { PROJECT_ROOT } from '../version.js';
import { ConfigError } from './errors.js';

/** The configuration's JSON layers: config/default.json and a config file, read, merged and addressed by key. */

/** Config keys holding file paths: in a config file they are relative to that file's directory. */
const PATH_KEYS: ReadonlyArray<[string, string]> = [
  ['replay', 'har'],
  ['record', 'har'],
];

export const DEFAULT_FILE = resolve(PROJECT_ROOT, 'config', 'default.json');
export const DEFAULT_SOURCE = 'config/default.json';

export function readJson(file: string, what: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(`${what}: cannot read ${file} (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  try {
    const v: unknown = JSON.parse(text);
    if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
    return v as Record<string, unknown>;
  } catch (e) {
    throw new ConfigError(`${what}: ${file} is not a JSON object (${(e as Error).message})`);
  }
}

export function merge(base: Record<string, unknown>, over: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const b = out[k];
    out[k] =
      v && typeof v === 'object' && !Array.isArray(v) && b && typeof b === 'object' && !Array.isArray(b)
        ? merge(b as Record<string, unknown>, v as Record<string, unknown>)
        : v;
  }
  return out;
}

/** Every key path of a JSON object, as `a.b`, for telling which layer set which key. */
export function keyPaths(obj: Record<string, unknown>, prefix = ''): string[] {
  return Object.entries(obj).flatMap(([k, v]) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? [`${prefix}${k}`, ...keyPaths(v as Record<string, unknown>, `${prefix}${k}.`)]
      : [`${prefix}${k}`],
  );
}

/**
 * A config file's comments: keys named `//`, at the top or in a section (JSON has no comments;
 * npm's package.json uses the same convention), are dropped before validation.
 */
export function withoutComments(obj: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) {
    if (k === '//') continue;
    out[k] = v && typeof v === 'object' && !Array.isArray(v) ? withoutComments(v as Record<string, unknown>) : v;
  }
  return out;
}

/** Relative paths in a config file are the file's own: resolved from its directory. */
export function resolvePaths(obj: Record<string, unknown>, dir: string): Record<string, unknown> {
  for (const [a, b] of PATH_KEYS) {
    const inner = obj[a];
    if (inner && typeof inner === 'object' && !Array.isArray(inner)) {
      const v = (inner as Record<string, unknown>)[b];
      if (typeof v === 'string' && v !== '') (inner as Record<string, unknown>)[b] = resolve(dir, v);
    }
  }
  return obj;
}

export function valueAt(obj: Record<string, unknown>, [a, b]: [string, string]): unknown {
  return (obj[a] as Record<string, unknown> | undefined)?.[b];
}

export function setPath(obj: Record<string, unknown>, [a, b]: [string, string], v: unknown) {
  const inner = (obj[a] && typeof obj[a] === 'object' ? obj[a] : {}) as Record<string, unknown>;
  obj[a] = { ...inner, [b]: v };
}
