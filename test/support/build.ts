import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { build, type Plugin } from 'esbuild';

/**
 * The scripts tests run as child processes (the CLI, its preloads, the memory flood, the bench),
 * compiled once per test run into plain JavaScript: starting one through tsx compiles every
 * module again in each child, which takes many seconds on a busy machine. esbuild comes with tsx.
 * Packages are bundled too: a child then reads one file instead of resolving, reading and
 * scanning hundreds, which was most of its start-up (the suite starts about 70 children).
 */

export const ROOT = resolve(import.meta.dirname, '..', '..');

/** Every script a test starts as a child process, relative to the project. */
export const CHILD_SCRIPTS = [
  'src/cli.ts',
  'test/support/inject-escape.ts',
  'test/support/memory-flood.ts',
  'bench/run.ts',
  'bench/upstream-process.ts',
  'bench/passthrough-upstream.ts',
  'bench/bare-passthrough.ts',
  'bench/shim-process.ts',
  'bench/ledger-memory.ts',
  'src/parse/parse-worker-thread.ts',
] as const;

/**
 * Modules that start a worker thread from the file beside them: bundled, they see their own
 * location as the bundle's (`import.meta.url` of the built module), so they start the bundled
 * worker (plain JavaScript, as dist/ ships it) rather than the TypeScript source through tsx's
 * loader, which took a second isolate for the loader's hooks and tsx itself in every worker
 * (about 90 MiB of a flood's peak RSS that a shipped shim does not have).
 */
const STARTS_WORKERS = ['src/parse/parse-worker.ts'];

/** The bundled file for `script` under `dir`. */
export function builtPath(dir: string, script: string): string {
  return join(dir, script.replace(/\.ts$/, '.js'));
}

/**
 * Each module keeps its own `import.meta.url` (and dirname, filename): the source file's, as
 * under tsx, so paths found beside the source (config/default.json, the package version, the
 * parse worker, bench's children) are the same wherever the bundle lies.
 */
const keepImportMeta = (dir: string): Plugin => ({
  name: 'keep-import-meta',
  setup(b) {
    const starters = new Map(STARTS_WORKERS.map((s) => [resolve(ROOT, s), pathToFileURL(builtPath(dir, s)).href]));
    b.onLoad({ filter: /\.ts$/ }, (args) => {
      const source = readFileSync(args.path, 'utf8');
      const contents = source
        .replaceAll('import.meta.url', JSON.stringify(starters.get(args.path) ?? pathToFileURL(args.path).href))
        .replaceAll('import.meta.dirname', JSON.stringify(dirname(args.path)))
        .replaceAll('import.meta.filename', JSON.stringify(args.path));
      return { contents, loader: 'ts' };
    });
  },
});

/** A leading shebang, comments and "use strict": the directive must stay the first statement. */
const DIRECTIVE = /^(?:#![^\n]*\n)?(?:\s|\/\/[^\n]*\n|\/\*[\s\S]*?\*\/)*(?:(['"])use strict\1;?)?/;

/**
 * A package's CommonJS modules keep their own `__dirname` and `__filename` (a bundle has none):
 * what they find beside themselves (their package.json, a worker file) is found where it lies.
 */
const keepModuleLocation: Plugin = {
  name: 'keep-module-location',
  setup(b) {
    b.onLoad({ filter: /[\\/]node_modules[\\/].*\.c?js$/ }, (args) => {
      const source = readFileSync(args.path, 'utf8');
      if (!/\b__(dirname|filename)\b/.test(source)) return undefined;
      const head = DIRECTIVE.exec(source)![0];
      const location = `var __dirname = ${JSON.stringify(dirname(args.path))}, __filename = ${JSON.stringify(args.path)};`;
      return { contents: `${head}\n${location}\n${source.slice(head.length)}`, loader: 'js' };
    });
  },
};

/**
 * ESM output has no `require`: packages written as CommonJS call it for Node's own modules (and
 * a few for optional ones), so the bundle makes one.
 */
const REQUIRE_BANNER =
  "import { createRequire as zcsCreateRequire } from 'node:module'; const require = zcsCreateRequire(import.meta.url);";

/** Bundles CHILD_SCRIPTS, with the packages they use, into `dir`. */
export async function buildChildScripts(dir: string): Promise<void> {
  await build({
    absWorkingDir: ROOT,
    entryPoints: CHILD_SCRIPTS.map((s) => ({ in: s, out: s.replace(/\.ts$/, '') })),
    outdir: dir,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    banner: { js: REQUIRE_BANNER },
    sourcemap: 'linked',
    logLevel: 'error',
    plugins: [keepImportMeta(dir), keepModuleLocation],
  });
}

/**
 * Where the bundles are: set by the global setup (test/support/global-setup.ts) for the test
 * processes and their children; bench/children.ts reads it too.
 */
export const BUILD_DIR_ENV = 'ZCS_BUILT_DIR';

/**
 * The node arguments that run `script`: its bundle when the global setup built one, else the
 * source through tsx (a test file run outside this project's vitest config).
 */
export function nodeArgsFor(script: string, preload: string[] = []): string[] {
  const dir = process.env[BUILD_DIR_ENV];
  const built = (s: string) => (dir && existsSync(builtPath(dir, s)) ? builtPath(dir, s) : undefined);
  const all = [...preload, script];
  if (all.every((s) => built(s) !== undefined)) {
    return [...preload.flatMap((p) => ['--import', pathToFileURL(built(p)!).href]), built(script)!];
  }
  return ['--import', 'tsx', ...preload.flatMap((p) => ['--import', `./${p}`]), script];
}
