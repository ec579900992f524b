import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFake, type FakeZulip } from './support/fake-zulip.js';

/**
 * The packed package as a consumer gets it: `npm pack` (which builds dist/ by `prepack`), the
 * tarball installed in a project of its own, every entry imported in ESM, a small consumer
 * type-checked against the shipped .d.ts files, and the README's examples for testers and
 * Express users run there as written.
 *
 * Installing: `npm install --offline` first. Where the npm cache cannot supply the dependencies
 * (this machine's cannot), the tarball is unpacked into node_modules/zulip-compat-shim and the
 * repository's node_modules entries are linked beside it for its dependencies: `installedBy`
 * says which was done.
 */

const ROOT = resolve(import.meta.dirname, '..');
const run = promisify(execFile);
/** The environment of a child: none of this vitest worker's own variables. */
const childEnv = (extra: Record<string, string> = {}) => ({
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('VITEST') && k !== 'NODE_OPTIONS')),
  ...extra,
});

interface Packed {
  filename: string;
  size: number;
  unpackedSize: number;
  entryCount: number;
  files: Array<{ path: string }>;
}

let dir: string;
let project: string;
let packed: Packed;
let installedBy: 'npm install --offline' | 'unpacked, dependencies linked from the repository';

/** Links every package of the repository's node_modules not already in the project's. */
function linkRepoModules(): void {
  const into = join(project, 'node_modules');
  mkdirSync(into, { recursive: true });
  for (const name of readdirSync(join(ROOT, 'node_modules'))) {
    if (name.startsWith('.') || name === 'zulip-compat-shim' || existsSync(join(into, name))) continue;
    symlinkSync(join(ROOT, 'node_modules', name), join(into, name), 'dir');
  }
}

/** The README's examples: the code block after each `<!-- example: FILE … -->`, by file name. */
function readmeExamples(): Map<string, string> {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const out = new Map<string, string>();
  for (const m of readme.matchAll(/<!-- example: (\S+)[^>]*-->\n```\w+\n([\s\S]*?)```/g)) out.set(m[1]!, m[2]!);
  return out;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'zcs-pack-'));
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: ROOT, env: childEnv(), maxBuffer: 1 << 26 });
  packed = (JSON.parse(stdout) as Packed[])[0]!;
  project = join(dir, 'consumer');
  mkdirSync(project);
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
  const tarball = join(dir, packed.filename);
  try {
    await run('npm', ['install', '--offline', '--no-audit', '--no-fund', '--no-package-lock', tarball], {
      cwd: project,
      env: childEnv(),
      timeout: 120_000,
    });
    installedBy = 'npm install --offline';
  } catch {
    const at = join(project, 'node_modules', 'zulip-compat-shim');
    mkdirSync(at, { recursive: true });
    await run('tar', ['-xzf', tarball, '-C', at, '--strip-components=1']);
    linkRepoModules();
    installedBy = 'unpacked, dependencies linked from the repository';
  }
  console.log(
    `packed ${packed.filename}: ${packed.size} bytes, ${packed.unpackedSize} unpacked, ${packed.entryCount} files; installed by ${installedBy}`,
  );
}, 240_000);

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('the packed package', () => {
  it('holds the built entries with their types and source maps, the sources they map to, the default configuration and the demo recording, and no test', () => {
    const files = packed.files.map((f) => f.path);
    for (const f of [
      'package.json',
      'dist/index.js',
      'dist/index.d.ts',
      'dist/express.js',
      'dist/express.d.ts',
      'dist/testing.js',
      'dist/testing.d.ts',
      'dist/cli.js',
      'dist/parse/parse-worker-thread.js',
      'config/default.json',
      'examples/demo-zulip-2.1.har',
    ]) {
      expect(files).toContain(f);
    }
    expect(files.filter((f) => f.startsWith('test/') || f.startsWith('bench/') || f.startsWith('scripts/'))).toEqual([]);
    // Source maps (the code's and the declarations'), each naming sources the package holds.
    for (const entry of ['index', 'express', 'testing', 'cli']) {
      for (const map of [`dist/${entry}.js.map`, `dist/${entry}.d.ts.map`]) {
        expect(files).toContain(map);
        const { sources } = JSON.parse(readFileSync(join(project, 'node_modules', 'zulip-compat-shim', map), 'utf8')) as {
          sources: string[];
        };
        for (const source of sources) expect(files).toContain(join('dist', source).replace(/\\/g, '/'));
      }
    }
    expect(files).toContain('CHANGELOG.md');
  });

  it('publishes no install script (prepare, preinstall, install, postinstall)', () => {
    const manifest = JSON.parse(readFileSync(join(project, 'node_modules', 'zulip-compat-shim', 'package.json'), 'utf8')) as {
      scripts?: Record<string, string>;
    };
    for (const hook of ['prepare', 'preinstall', 'install', 'postinstall']) expect(manifest.scripts?.[hook], hook).toBeUndefined();
  });

  it('a CommonJS TypeScript consumer (module commonjs, moduleResolution node10) type-checks against every entry, and runs', async () => {
    linkRepoModules(); // typescript and @types, as a consumer's devDependencies
    const cjs = join(dir, 'cjs-consumer');
    mkdirSync(join(cjs, 'node_modules'), { recursive: true });
    symlinkSync(join(project, 'node_modules', 'zulip-compat-shim'), join(cjs, 'node_modules', 'zulip-compat-shim'), 'dir');
    for (const name of readdirSync(join(project, 'node_modules'))) {
      if (!existsSync(join(cjs, 'node_modules', name)))
        symlinkSync(join(project, 'node_modules', name), join(cjs, 'node_modules', name), 'dir');
    }
    writeFileSync(join(cjs, 'package.json'), JSON.stringify({ name: 'cjs-consumer', private: true }));
    writeFileSync(
      join(cjs, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'commonjs',
          moduleResolution: 'node10',
          target: 'ES2020',
          strict: true,
          esModuleInterop: true,
          outDir: 'out',
          types: ['node'],
        },
        files: ['consumer.ts'],
      }),
    );
    writeFileSync(
      join(cjs, 'consumer.ts'),
      `import { createShim, resolveConfig, type ShimConfig, type ShimOptions } from 'zulip-compat-shim';
import { BodyConsumedError, zulipCompatShim, type ZulipCompatShimMiddleware } from 'zulip-compat-shim/express';
import { startReplay, type RunningReplay } from 'zulip-compat-shim/testing';

const options: ShimOptions = { replay: { demo: true }, server: { port: 0 }, log: { level: 'silent' } };
// @ts-expect-error: no such setting (the types were found, not taken as any)
const misspelt: ShimOptions = { server: { prot: 0 } };
const config: ShimConfig = resolveConfig(options);
const middleware: ZulipCompatShimMiddleware = zulipCompatShim({ ...options, passThrough: false });
// @ts-expect-error: startReplay takes no upstream (the types of /testing were found)
void startReplay({ upstream: { url: 'https://x.example' } }).catch(() => undefined);

async function main(): Promise<void> {
  const zulip: RunningReplay = await startReplay();
  const settings = (await (await fetch(zulip.url + '/api/v1/server_settings')).json()) as { zulip_version: string };
  await zulip.close();
  await middleware.close();
  const shim = await createShim(options);
  await shim.close();
  console.log(JSON.stringify({ version: settings.zulip_version, port: config.server.port, error: new BodyConsumedError('x').name, misspelt }));
}
void main();
`,
    );
    const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const result = await run('node', [tsc, '-p', 'tsconfig.json'], { cwd: cjs, env: childEnv() }).then(
      (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
      (e: { code: number; stdout: string; stderr: string }) => e,
    );
    expect({ code: result.code, stdout: result.stdout, stderr: result.stderr }).toEqual({ code: 0, stdout: '', stderr: '' });
    // Compiled to require(): Node loads the ES modules by require(esm) (20.19, 22.12: package.json "engines").
    expect(readFileSync(join(cjs, 'out', 'consumer.js'), 'utf8')).toMatch(/require\("zulip-compat-shim\/testing"\)/);
    const { stdout } = await run('node', ['out/consumer.js'], { cwd: cjs, env: childEnv({ NODE_NO_WARNINGS: '1' }) });
    expect(JSON.parse(stdout)).toEqual({
      version: expect.stringMatching(/^2\.1/),
      port: 0,
      error: 'BodyConsumedError',
      misspelt: { server: { prot: 0 } },
    });
  }, 120_000);

  it('imports every entry in ESM from the installed package, and replays its own demo recording', async () => {
    writeFileSync(
      join(project, 'check.mjs'),
      `import * as main from 'zulip-compat-shim';
import * as express from 'zulip-compat-shim/express';
import * as testing from 'zulip-compat-shim/testing';
const keys = (m) => Object.keys(m).sort();
const zulip = await testing.startReplay();
const settings = await fetch(zulip.url + '/api/v1/server_settings').then((r) => r.json());
await zulip.close();
console.log(JSON.stringify({
  main: keys(main), express: keys(express), testing: keys(testing),
  resolved: import.meta.resolve('zulip-compat-shim'), demo: main.DEMO_HAR, version: settings.zulip_version,
}));
`,
    );
    const { stdout } = await run('node', ['check.mjs'], { cwd: project, env: childEnv() });
    const seen = JSON.parse(stdout) as Record<string, unknown>;
    expect(seen).toEqual({
      main: ['ConfigError', 'DEMO_HAR', 'createShim', 'resolveConfig'],
      express: ['BodyConsumedError', 'zulipCompatShim'],
      testing: ['ReplayMissError', 'startReplay'],
      resolved: `file://${join(project, 'node_modules', 'zulip-compat-shim', 'dist', 'index.js')}`,
      demo: join(project, 'node_modules', 'zulip-compat-shim', 'examples', 'demo-zulip-2.1.har'),
      version: expect.stringMatching(/^2\.1/),
    });
  }, 120_000); // a compiler and a module graph in a child process: slow beside the rest of the suite

  it('type-checks a consumer of every entry (NodeNext, strict), and refuses a misspelt setting', async () => {
    linkRepoModules(); // typescript, express and @types, as a consumer's devDependencies
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          target: 'ES2022',
          strict: true,
          noEmit: true,
          types: ['node'],
        },
        files: ['consumer.ts'],
      }),
    );
    writeFileSync(
      join(project, 'consumer.ts'),
      `import http from 'node:http';
import express from 'express';
import { ConfigError, createShim, resolveConfig, type Shim, type ShimAddress, type ShimConfig, type ShimOptions } from 'zulip-compat-shim';
import { BodyConsumedError, zulipCompatShim, type ZulipCompatShimMiddleware } from 'zulip-compat-shim/express';
import { ReplayMissError, startReplay, type RunningReplay } from 'zulip-compat-shim/testing';
import type { Registry } from 'prom-client';

const options: ShimOptions = { upstream: { url: 'https://chat.example.com' }, server: { port: 0, realmHosts: ['chat.example.com'] } };
// @ts-expect-error: no such setting
const misspelt: ShimOptions = { server: { prot: 0 } };
// @ts-expect-error: a setting of the wrong type
const wrongType: ShimOptions = { presence: { coalesceMs: 'soon' } };
const config: ShimConfig = resolveConfig(options);
const port: number = config.server.port;

export async function library(): Promise<void> {
  const shim: Shim = await createShim({ ...options, logDestination: { write: (line: string) => void line } });
  const address: ShimAddress = await shim.listen(0, '127.0.0.1');
  const registry: Registry = shim.metrics;
  http.createServer(shim.handler);
  await shim.close();
  void [address.url, registry, port, misspelt, wrongType];
}

const app = express();
const middleware: ZulipCompatShimMiddleware = zulipCompatShim({ ...options, passThrough: false });
app.use(middleware);
app.use('/zulip', zulipCompatShim(options));
app.use((err: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
  res.status(err instanceof BodyConsumedError ? err.status : 500).end();
});

export async function tester(): Promise<string[]> {
  const zulip: RunningReplay = await startReplay({ har: 'fixtures/session.har', presence: { coalesceMs: 0 }, onMiss: (m: string) => void m });
  try {
    await zulip.close();
  } catch (e) {
    if (e instanceof ReplayMissError) return e.misses;
    if (e instanceof ConfigError) return [e.message];
  }
  return zulip.misses();
}
`,
    );
    const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const result = await run('node', [tsc, '-p', 'tsconfig.json'], { cwd: project, env: childEnv() }).then(
      (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
      (e: { code: number; stdout: string; stderr: string }) => e,
    );
    expect({ code: result.code, stdout: result.stdout, stderr: result.stderr }).toEqual({ code: 0, stdout: '', stderr: '' });
  }, 120_000); // a compiler and a module graph in a child process: slow beside the rest of the suite
});

describe("the README's examples, run against the installed package", () => {
  let fake: FakeZulip;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    linkRepoModules(); // vitest and express, as the examples' projects have them
  });
  afterAll(() => fake.stop());

  it('finds both examples', () => {
    expect([...readmeExamples().keys()]).toEqual(['test/replay.test.ts', 'server.mjs']);
  });

  it('for testers: the vitest file passes', async () => {
    mkdirSync(join(project, 'test'), { recursive: true });
    writeFileSync(join(project, 'test', 'replay.test.ts'), readmeExamples().get('test/replay.test.ts')!);
    const vitest = join(ROOT, 'node_modules', 'vitest', 'vitest.mjs');
    const result = await run('node', [vitest, 'run', '--root', project, 'test/replay.test.ts'], {
      cwd: project,
      env: childEnv({ CI: 'true', NO_COLOR: '1' }),
      timeout: 120_000,
    }).then(
      (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
      (e: { code: number; stdout: string; stderr: string }) => e,
    );
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).toMatch(/Tests\s+1 passed \(1\)/);
  }, 150_000);

  it('for Express users: the app answers the modern API, its own route and the pass-through', async () => {
    writeFileSync(join(project, 'server.mjs'), readmeExamples().get('server.mjs')!);
    const child = spawn('node', ['server.mjs'], { cwd: project, env: childEnv({ ZULIP_URL: fake.url, PORT: '0' }) });
    try {
      const url = await new Promise<string>((ok, fail) => {
        let out = '';
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          const m = /listening on (http:\S+)/.exec(out);
          if (m) ok(m[1]!);
        });
        child.once('exit', (code) => fail(new Error(`server.mjs exited ${code}: ${out}`)));
      });
      const poll = await fetch(`${url}/api/v1/users/me/presence`, {
        method: 'POST',
        headers: { authorization: fake.auth(10), 'content-type': 'application/x-www-form-urlencoded' },
        body: 'status=active&last_update_id=-1',
      });
      expect(poll.status).toBe(200);
      expect(await poll.json()).toHaveProperty('presence_last_update_id');
      expect(await (await fetch(`${url}/status`)).json()).toEqual({ ok: true });
      expect(await (await fetch(`${url}/test/echo?through=1`)).json()).toMatchObject({ url: '/test/echo?through=1' });
      const exited = new Promise((ok) => child.once('exit', ok));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
