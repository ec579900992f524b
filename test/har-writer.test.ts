import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { HarEntry } from '../src/har/har.js';
import { Redactor } from '../src/har/redact.js';
import { HarWriter } from '../src/har/writer.js';
import { createLogger } from '../src/observability/logger.js';

const log = createLogger('silent');

function entry(path: string, text: string, startedAt: number): HarEntry {
  return {
    startedDateTime: new Date(startedAt).toISOString(),
    time: 1,
    request: {
      method: 'GET',
      url: `http://u.example${path}`,
      httpVersion: 'HTTP/1.1',
      cookies: [],
      headers: [],
      queryString: [],
      headersSize: -1,
      bodySize: 0,
    },
    response: {
      status: 200,
      statusText: 'OK',
      httpVersion: 'HTTP/1.1',
      cookies: [],
      headers: [],
      content: { size: text.length, mimeType: 'text/plain', text },
      redirectURL: '',
      headersSize: -1,
      bodySize: text.length,
    },
    cache: {},
    timings: { send: 0, wait: 1, receive: 0 },
  };
}

describe('HarWriter (H1)', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'zcs-writer-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('keeps the file valid JSON after every write, entries in start order, no temporary file left', async () => {
    const file = join(dir, 'a.har');
    const w = new HarWriter({ file, redactor: new Redactor(), log, comment: 'made in a test', flushMs: 10_000 });
    await w.flush();
    expect(JSON.parse(readFileSync(file, 'utf8'))).toMatchObject({ log: { version: '1.2', comment: 'made in a test', entries: [] } });
    w.add(entry('/second', 'b', 2000), 2000);
    w.add(entry('/first', 'a', 1000), 1000);
    await w.flush();
    const har = JSON.parse(readFileSync(file, 'utf8')) as { log: { entries: HarEntry[] } };
    expect(har.log.entries.map((e) => e.request.url)).toEqual(['http://u.example/first', 'http://u.example/second']);
    w.add(entry('/third', 'c', 3000), 3000);
    await w.close();
    expect((JSON.parse(readFileSync(file, 'utf8')) as { log: { entries: HarEntry[] } }).log.entries).toHaveLength(3);
    expect(readdirSync(dir)).toEqual(['a.har']);
  });

  it('replaces a secret learnt after an entry was kept in that entry too', async () => {
    const file = join(dir, 'b.har');
    const redactor = new Redactor();
    const w = new HarWriter({ file, redactor, log, flushMs: 10_000 });
    const secret = 'k3yL3arntLat3r0123456789';
    w.add(entry('/echo', `the key is ${secret}`, 1000), 1000);
    const placeholder = redactor.placeholder(secret);
    await w.close();
    const text = readFileSync(file, 'utf8');
    expect(text).not.toContain(secret);
    expect(text).toContain(`the key is ${placeholder}`);
  });

  it('writes on its own within flushMs of a new entry', async () => {
    const file = join(dir, 'c.har');
    const w = new HarWriter({ file, redactor: new Redactor(), log, flushMs: 20 });
    w.add(entry('/x', 'x', 1000), 1000);
    for (let i = 0; i < 200; i++) {
      await new Promise((r) => setTimeout(r, 10));
      try {
        if ((JSON.parse(readFileSync(file, 'utf8')) as { log: { entries: unknown[] } }).log.entries.length === 1) break;
      } catch {
        // not written yet
      }
    }
    expect((JSON.parse(readFileSync(file, 'utf8')) as { log: { entries: unknown[] } }).log.entries).toHaveLength(1);
    await w.close();
  });
});
