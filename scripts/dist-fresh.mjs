// `npm start`'s prestart: exits 0 when dist/ is built from the sources as they are (dist/cli.js
// newer than every file of src/, package.json and the tsconfig files), 1 when it must be built
// (a fresh clone, or a source changed since): `node scripts/dist-fresh.mjs || npm run build`.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const mtime = (path) => {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return undefined;
  }
};
const newest = (dir) => {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) latest = Math.max(latest, statSync(join(entry.parentPath ?? entry.path, entry.name)).mtimeMs);
  }
  return latest;
};

const built = mtime('dist/cli.js');
const sources = Math.max(newest('src'), ...['package.json', 'tsconfig.json', 'tsconfig.build.json'].map((f) => mtime(f) ?? 0));
process.exit(built !== undefined && built >= sources ? 0 : 1);
