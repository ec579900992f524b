import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nodeArgsFor } from './support/build.js';
import { cleanEnv, ROOT } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';

/** --replay, --replay-strict, --record and the bundled demo, as a user runs them (H1, H2). */

const DEVTOOLS = 'test/fixtures/devtools.har';

interface Run {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<number | null>;
}

function cli(args: string[]): Run {
  const child = spawn(process.execPath, [...nodeArgsFor('src/cli.ts'), ...args], { cwd: ROOT, env: cleanEnv() });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((r) => child.on('close', (code) => r(code)));
  return { child, stdout: () => out, stderr: () => err, exited };
}

/** The address from the start-up log line. */
async function listening(run: Run): Promise<string> {
  const end = Date.now() + 15_000;
  for (;;) {
    const m = /"listen":"(http:\/\/[^"]+)"/.exec(run.stdout());
    if (m) return m[1]!;
    if (Date.now() > end) throw new Error(`no start-up line; stderr: ${run.stderr()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const stop = async (run: Run) => {
  run.child.kill('SIGTERM');
  return run.exited;
};

describe.concurrent('replay from the command line', () => {
  it('--replay-strict: misses are answered 502, then listed on stderr at shutdown, exit code 1', async () => {
    const run = cli(['--replay', DEVTOOLS, '--replay-strict', '--port', '0', '--log-level', 'info']);
    try {
      const url = await listening(run);
      const hit = await fetch(`${url}/json/users/me/alert_words`);
      expect(hit.status).toBe(200);
      const miss = await fetch(`${url}/api/v1/nothing?b=2&a=1`);
      expect(miss.status).toBe(502);
      expect(await miss.json()).toMatchObject({ code: 'REPLAY_MISS' });
      const other = await fetch(`${url}/json/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: 'content=unrecorded',
      });
      expect(other.status).toBe(502);
      expect(await stop(run)).toBe(1);
      expect(run.stderr().trimEnd().split('\n')).toEqual([
        'zulip-compat-shim: replay miss: GET /api/v1/nothing?a=1&b=2',
        'zulip-compat-shim: replay miss: POST /json/messages with form body content=unrecorded',
      ]);
    } finally {
      run.child.kill('SIGKILL');
    }
  });

  it('without strict mode a miss is only answered 502: exit code 0', async () => {
    const run = cli(['--replay', DEVTOOLS, '--port', '0', '--log-level', 'info']);
    try {
      const url = await listening(run);
      expect((await fetch(`${url}/api/v1/nothing`)).status).toBe(502);
      expect(await stop(run)).toBe(0);
      expect(run.stderr()).toBe('');
    } finally {
      run.child.kill('SIGKILL');
    }
  });

  it('--record with --replay is a configuration error: exit 2, one line', async () => {
    const run = cli(['--replay', DEVTOOLS, '--record', 'out.har']);
    expect(await run.exited).toBe(2);
    const lines = run.stderr().trimEnd().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/record\.har \(--record\): recording needs --upstream URL, not with --replay/);
  });

  it('a file that is not a HAR is a configuration error naming it', async () => {
    const run = cli(['--replay', 'package.json']);
    expect(await run.exited).toBe(2);
    expect(run.stderr().trimEnd().split('\n')).toEqual([
      expect.stringMatching(/^zulip-compat-shim: invalid configuration: replay\.har \(--replay\): .*package\.json is not a HAR file/),
    ]);
  });
});

describe('the bundled demo and --record', () => {
  let fake: FakeZulip;
  let dir: string;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    fake.report(11, 'active');
    dir = mkdtempSync(join(tmpdir(), 'zcs-cli-har-'));
  });
  afterAll(async () => {
    await fake.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('--demo serves the bundled recording and says in plain words how to try it', async () => {
    const run = cli(['--demo', '--port', '0', '--log-level', 'info']);
    try {
      const url = await listening(run);
      const curl = `curl -s -u demo@example.com:any-key -d status=active -d last_update_id=-1 ${url}/api/v1/users/me/presence`;
      expect(run.stdout()).toContain(curl);
      expect(run.stdout()).toContain(`listening on ${url}`);
      // What that curl command does: a full modern answer, then deltas.
      const poll = async (id: number) => {
        const r = await fetch(`${url}/api/v1/users/me/presence`, {
          method: 'POST',
          headers: {
            authorization: `Basic ${Buffer.from('demo@example.com:any-key').toString('base64')}`,
            'content-type': 'application/x-www-form-urlencoded',
          },
          body: `status=active&last_update_id=${id}`,
        });
        expect(r.status).toBe(200);
        return (await r.json()) as {
          presences: Record<string, { active_timestamp: number; idle_timestamp: number }>;
          presence_last_update_id: number;
        };
      };
      const full = await poll(-1);
      expect(Object.keys(full.presences).length).toBeGreaterThanOrEqual(30);
      for (const e of Object.values(full.presences)) expect(e.idle_timestamp).toBeGreaterThanOrEqual(e.active_timestamp);
      const next = await poll(full.presence_last_update_id);
      expect(Object.keys(next.presences).length).toBeLessThan(Object.keys(full.presences).length);
      expect(next.presence_last_update_id).toBeGreaterThanOrEqual(full.presence_last_update_id);
      expect(await stop(run)).toBe(0);
    } finally {
      run.child.kill('SIGKILL');
    }
  });

  it('--demo bound to every interface (a container) shows the curl command on the loopback', async () => {
    const run = cli(['--demo', '--host', '0.0.0.0', '--port', '0', '--log-level', 'info']);
    try {
      const url = await listening(run);
      const port = new URL(url).port;
      expect(run.stdout()).toContain(`listening on http://0.0.0.0:${port}`);
      expect(run.stdout()).toContain(`last_update_id=-1 http://127.0.0.1:${port}/api/v1/users/me/presence`);
      expect(run.stdout()).not.toContain(`0.0.0.0:${port}/api`);
      expect(await stop(run)).toBe(0);
    } finally {
      run.child.kill('SIGKILL');
    }
  });

  it('--upstream with --record writes the exchanges to the file, redacted, by the time the process exits', async () => {
    const file = join(dir, 'cli.har');
    const run = cli(['--upstream', fake.url, '--record', file, '--port', '0', '--log-level', 'info']);
    try {
      const url = await listening(run);
      const r = await fetch(`${url}/api/v1/users`, { headers: { authorization: fake.auth(10) } });
      expect(r.status).toBe(200);
      expect(await stop(run)).toBe(0);
      const har = JSON.parse(readFileSync(file, 'utf8')) as { log: { entries: Array<{ request: { url: string } }> } };
      expect(har.log.entries.map((e) => e.request.url)).toContain(`${fake.url}/api/v1/users`);
      expect(readFileSync(file, 'utf8')).not.toContain(fake.user(10).api_key);
    } finally {
      run.child.kill('SIGKILL');
    }
  });

  it('an unwritable --record file is a configuration error', async () => {
    const run = cli(['--upstream', fake.url, '--record', join(dir, 'no', 'such', 'dir.har')]);
    expect(await run.exited).toBe(2);
    expect(run.stderr().trimEnd().split('\n')).toEqual([
      expect.stringMatching(/record\.har \(--record\): cannot write .*dir\.har \(ENOENT\)$/),
    ]);
  });
});
