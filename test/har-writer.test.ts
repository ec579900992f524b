import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { HarEntry } from '../src/har/har.js';
import { Redactor } from '../src/har/redact.js';
import { HAR_FLUSH_MS, HarWriter } from '../src/har/writer.js';
import { createLogger } from '../src/observability/logger.js';
import { compileSchema } from './support/schema.js';

const log = createLogger('silent');

const validateHar = compileSchema('har.schema.json');

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const heapAfterGc = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};

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

/** Validity and entry count of a HAR file (only small values reach `expect`, which may keep them). */
function checkFile(file: string): { valid: boolean | string; entries: number } {
  const har = JSON.parse(readFileSync(file, 'utf8')) as { log: { entries: unknown[] } };
  const valid = validateHar(har) || JSON.stringify(validateHar.errors);
  return { valid, entries: har.log.entries.length };
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

  it('writes bodies in pieces exactly as one JSON text would: pairs across a piece boundary, a text holding the mark', async () => {
    const file = join(dir, 'pieces.har');
    const w = new HarWriter({ file, redactor: new Redactor(), log, flushMs: 10_000 });
    // A surrogate pair straddling the 64 Ki-character piece boundary, quotes and newlines to
    // escape, and U+2028 (once indented as a line end: six spaces inside the body).
    const big = `${'x'.repeat(64 * 1024 - 1)}😀"\n${'é'.repeat(70_000)}\u2028end`;
    const marked = entry('/mark', 'a body holding \u0000har-body\u0000 itself', 2000);
    const upload = entry('/upload', 'ok', 3000);
    upload.request.postData = { mimeType: 'text/plain', text: `${'u'.repeat(100_000)}"` };
    const entries = [entry('/big', big, 1000), marked, upload];
    for (const e of entries) w.add(e, Date.parse(e.startedDateTime));
    await w.close();
    const text = readFileSync(file, 'utf8');
    const har = JSON.parse(text) as { log: { entries: HarEntry[] } };
    expect(har.log.entries).toEqual(entries);
    const whole = entries.map((e) => `      ${JSON.stringify(e, null, 2).replace(/\n/g, '\n      ')}`).join(',\n');
    expect(text.includes(whole)).toBe(true);
  });

  it('writes a response text given as UTF-8 bytes exactly as JSON.stringify writes the string, and scrubs it for a secret learnt later', async () => {
    const file = join(dir, 'bytes.har');
    const redactor = new Redactor();
    const w = new HarWriter({ file, redactor, log, flushMs: 10_000 });
    const secret = 'byt3sS3cr3tL3arntLat3r';
    const text = `{"a":"q\\"\\\\ \u0001\u001f\u007f"}\n\t\r\b\f😀é\u2028${'z'.repeat(70_000)}€ ${secret}`;
    const withText = entry('/bytes', text, 1000);
    const { text: _left, ...content } = withText.response.content;
    w.add({ ...withText, response: { ...withText.response, content } }, 1000, Buffer.from(text));
    const placeholder = redactor.placeholder(secret);
    await w.close();
    const har = JSON.parse(readFileSync(file, 'utf8')) as { log: { entries: HarEntry[] } };
    const scrubbed = { ...withText.response.content, text: text.replace(secret, placeholder) };
    expect(har.log.entries).toEqual([{ ...withText, response: { ...withText.response, content: scrubbed } }]);
  });

  it('escapes a large UTF-8 body straight into the file, byte for byte as JSON.stringify, across the edges of its output buffer (X8)', async () => {
    const file = join(dir, 'large-bytes.har');
    const w = new HarWriter({ file, redactor: new Redactor(), log, flushMs: 10_000 });
    // Escapes of every length (2 and 6 bytes) and multi-byte characters at every offset of a 256 KiB buffer.
    const unit = '"\\\u0001é😀€x\n';
    const text = unit.repeat(Math.ceil(900_000 / unit.length));
    const withText = entry('/large', text, 1000);
    const { text: _left, ...content } = withText.response.content;
    w.add({ ...withText, response: { ...withText.response, content } }, 1000, Buffer.from(text));
    await w.close();
    const written = readFileSync(file, 'utf8');
    expect(written.includes(JSON.stringify(text))).toBe(true);
    const har = JSON.parse(written) as { log: { entries: HarEntry[] } };
    expect(har.log.entries).toEqual([withText]);
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

  it('X8: a recording the shim makes is valid HAR on disk within a second of an exchange', () => {
    expect(HAR_FLUSH_MS).toBeLessThanOrEqual(1_000);
  });

  it('replaces, at close, a secret learnt after its entry reached the file', async () => {
    const file = join(dir, 'd.har');
    const redactor = new Redactor();
    const w = new HarWriter({ file, redactor, log, flushMs: 10_000 });
    const secret = 'k3yL3arntMuchLat3r98765';
    w.add(entry(`/echo?x=${secret}`, `the key is ${secret}`, 1000), 1000);
    await w.flush();
    expect(readFileSync(file, 'utf8')).toContain(secret);
    const placeholder = redactor.placeholder(secret);
    w.add(entry('/later', 'later', 2000), 2000);
    await w.close();
    const text = readFileSync(file, 'utf8');
    expect(text).not.toContain(secret);
    expect(text).toContain(`the key is ${placeholder}`);
    expect(validateHar(JSON.parse(text)), JSON.stringify(validateHar.errors)).toBe(true);
    expect(readdirSync(dir)).toEqual(['d.har']);
  });

  it('X8: memory does not grow with the number of entries; the file is valid HAR at every flush', async () => {
    const file = join(dir, 'e.har');
    const w = new HarWriter({ file, redactor: new Redactor(), log, flushMs: 10_000 });
    const body = 'x'.repeat(16 * 1024);
    const round = async (from: number, n: number) => {
      for (let i = from; i < from + n; i++) w.add(entry(`/e/${i}`, body, 1000 + i), 1000 + i);
      await w.flush();
    };
    await round(0, 500); // warm-up: buffers and code settle
    const before = heapAfterGc();
    for (let r = 0; r < 8; r++) {
      await round(500 + r * 500, 500);
      // Mid-run, after a flush: a complete HAR on disk.
      if (r === 3) expect(checkFile(file)).toEqual({ valid: true, entries: 2500 });
    }
    const grown = heapAfterGc() - before;
    // 4,000 entries of 16 KiB each would be > 64 MiB if kept; a streaming writer keeps none.
    expect(grown).toBeLessThan(8 * 1024 * 1024);
    await w.close();
    const har = JSON.parse(readFileSync(file, 'utf8')) as { log: { entries: HarEntry[] } };
    expect(validateHar(har), JSON.stringify(validateHar.errors)).toBe(true);
    expect(har.log.entries).toHaveLength(4500);
    expect(har.log.entries.map((e) => e.startedDateTime)).toEqual([...har.log.entries.map((e) => e.startedDateTime)].sort());
  }, 60_000);
});
