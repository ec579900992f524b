import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { logLine, runCli, until } from './support/cli-run.js';

/**
 * E4's last line, in the built CLI (SECURITY.md): an error that escapes every request handler
 * never passes silently. An uncaught exception is logged, the shim closes and exits 70 for the
 * supervisor to restart it; an unhandled rejection is logged and the shim keeps serving.
 */

/** src/serve.ts EXIT_UNCAUGHT (EX_SOFTWARE); not imported: the test runs the CLI as a child. */
const EXIT_UNCAUGHT = 70;

describe('errors that escape every handler', () => {
  let fake: FakeZulip;
  beforeAll(async () => {
    fake = await startFake({ era: '5.0' });
  });
  afterAll(async () => {
    await fake.stop();
  });

  const start = (inject: string) =>
    runCli(['--upstream', fake.url, '--port', '0', '--log-level', 'info'], {
      preload: ['test/support/inject-escape.ts'],
      env: { ZCS_TEST_INJECT: inject },
    });

  it('an uncaught exception is logged, then the shim closes and exits 70 for a restart', async () => {
    const run = start('exception');
    try {
      await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      run.child.kill('SIGUSR2');
      expect(await run.exited).toBe(EXIT_UNCAUGHT);
      const fatal = logLine(run, /^uncaught exception/);
      expect(fatal).toMatchObject({ level: 60 });
      expect(JSON.stringify(fatal)).toMatch(/injected: an exception no handler caught/);
      expect(logLine(run, 'shutting down')).toMatchObject({ signal: 'uncaughtException' });
    } finally {
      run.child.kill('SIGKILL');
    }
  }, 60_000);

  it('an unhandled rejection is logged and the shim keeps serving', async () => {
    const run = start('rejection');
    try {
      const started = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      run.child.kill('SIGUSR2');
      const logged = await until('the rejection to be logged', () => logLine(run, /^unhandled promise rejection/));
      expect(logged).toMatchObject({ level: 50 });
      const health = await fetch(new URL('/healthz', String(started.listen)));
      expect(health.status).toBe(200);
      const settings = await fetch(new URL('/api/v1/server_settings', String(started.listen)));
      expect(settings.status).toBe(200);
      run.child.kill('SIGTERM');
      expect(await run.exited).toBe(0);
    } finally {
      run.child.kill('SIGKILL');
    }
  }, 60_000);
});
