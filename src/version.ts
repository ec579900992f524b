import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package's root directory (package.json, config/, examples/), from src/ or dist/ alike. */
export const PROJECT_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

export const VERSION: string = (JSON.parse(readFileSync(resolve(PROJECT_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
