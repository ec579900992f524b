import http from 'node:http';
import { gunzipSync } from 'node:zlib';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { realmKeyOf } from './realm-key.js';
import { startFake, type FakeZulip } from './fake-zulip.js';
import { jsonOf, send, sendRaw, type Answer, type Outgoing } from './http-client.js';
import { findSecret, registerSecret } from './secrets.js';
import { startShim, type RunningShim } from './shim.js';
import { PRESENCE_PARAMS } from '../../src/presence/params.js';
import { snapshotHub } from './budgets.js';

/**
 * Bad input (E1–E4, P13): thousands of generated requests (malformed and mixed-up content
 * types, broken multipart, invalid UTF-8, duplicated and huge parameters, bodies over the limit,
 * missing or malformed credentials, absurd last_update_id values, raw CR/LF and odd request
 * targets) against the intercepted endpoints and the pass-through. Every answer is either the
 * upstream's (marked by the fake) or a shim error in Zulip's shape; nothing hangs or crashes;
 * afterwards ordinary clients still get every update (P6).
 */

const LIMIT = 32 * 1024;
const REQUEST_TIMEOUT_MS = 20_000;
const HUMANS = [10, 11, 12, 13, 14, 15];
const BOT = 16;

const WRONG_KEY = registerSecret('zcs-fuzz-wrong-key-0001');
const BEARER = registerSecret('zcs-fuzz-bearer-token-0002');

let fake: FakeZulip;
let shim: RunningShim;
let agent: http.Agent;
/** Real presence_last_update_id values seen, to send back (deltas) and to shift (P5). */
const seenIds: number[] = [];
let sent = 0;
let requestSeq = 0;
/**
 * FUZZ_RUNS=n scales the generated runs (default 150 runs of 40–48 requests: at least 6,000),
 * shared out among the files that run this suite (test/fuzz*.test.ts), each with its own shim;
 * the fixed cases (FIXED_CASES) run before them in the first.
 */
const RUNS = Number(process.env.FUZZ_RUNS ?? 150);

// ------------------------------------------------------------------ generated requests

const ROUTE_NAMES = ['presence', 'presence-json', 'register', 'profile', 'passthrough'] as const;
const ENCODINGS = ['urlencoded', 'multipart', 'query-only', 'raw-bytes', 'broken-multipart', 'json', 'text', 'mixed-up'] as const;
const AUTHS = ['valid', 'bot', 'wrong-key', 'unknown-user', 'garbage', 'empty', 'bearer', 'none', 'twice', 'cookie'] as const;
type Route = (typeof ROUTE_NAMES)[number];
type Encoding = (typeof ENCODINGS)[number];
type Auth = (typeof AUTHS)[number];

interface Case {
  route: Route;
  /** Parameters, split between the query and the body as `inQuery` says. */
  params: Array<[string, string]>;
  inQuery: boolean[];
  encoding: Encoding;
  contentType: string | undefined;
  auth: Auth;
  user: number;
  host: string | undefined;
  chunked: boolean;
  /** Extra bytes that push the body over the limit. */
  oversize: number;
  acceptGzip: boolean;
  requestId: string | undefined;
  seed: number;
}

const PARAM_NAMES = [...PRESENCE_PARAMS, 'event_types', 'fetch_event_types', 'apply_markdown', 'client_gravatar', 'queue_id', 'api_key'];

/** last_update_id / history_limit_days values, from plausible to absurd; `@id…` = a real id. */
const absurdInt = fc.oneof(
  fc.constantFrom(
    '-1',
    '0',
    '-0',
    '1',
    '-5',
    '3',
    '9223372036854775808',
    '-9223372036854775809',
    '18446744073709551616',
    '1e400',
    '-1e400',
    '1e3',
    '1.5',
    '1.0',
    '2.',
    '.5',
    'true',
    'false',
    'null',
    '"5"',
    '[]',
    '[1]',
    '{}',
    'abc',
    '',
    ' ',
    '0x10',
    'NaN',
    'Infinity',
    '-Infinity',
    '05',
    '+5',
    ' 7 ',
    '7\n',
    '99999999999999999999',
    '9007199254740993',
    '@id',
    '@id+1',
    '@id-1',
    '@id*1000',
  ),
  fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map(String),
  fc.integer({ min: 1, max: 3000 }).map((n) => '9'.repeat(n)),
  fc.integer({ min: -100, max: 100 }).map(String),
);

const oddString = fc.oneof(
  fc.string({ maxLength: 20 }),
  fc.string({ unit: 'binary', maxLength: 20 }),
  fc.constantFrom('\u0000', '\uFFFD', '\uD800', '%', '%zz', '%ff%fe', '&', '=', '+', '\r\n', 'a&status=idle'),
);

const value = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.constantFrom('active', 'idle', 'true', 'false', '1', '0', 'maybe', 'null', '["presence"]', '["message"]', '[]', '{'),
  },
  { weight: 3, arbitrary: oddString },
  { weight: 3, arbitrary: absurdInt },
  { weight: 1, arbitrary: fc.integer({ min: 1000, max: 40_000 }).map((n) => 'v'.repeat(n)) },
);

const param: fc.Arbitrary<[string, string]> = fc.oneof(
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom('last_update_id', 'history_limit_days'), absurdInt) },
  { weight: 4, arbitrary: fc.tuple(fc.constantFrom(...PARAM_NAMES), value) },
  { weight: 1, arbitrary: fc.tuple(oddString, value) },
);

const CONTENT_TYPES: Record<Encoding, fc.Arbitrary<string | undefined>> = {
  urlencoded: fc.constantFrom(
    'application/x-www-form-urlencoded',
    'application/x-www-form-urlencoded; charset=UTF-8',
    'APPLICATION/X-WWW-FORM-URLENCODED',
    undefined,
  ),
  multipart: fc.constant('multipart/form-data; boundary=----zcsFuzzBoundary'),
  'query-only': fc.constantFrom(undefined, 'application/x-www-form-urlencoded'),
  'raw-bytes': fc.constantFrom('application/x-www-form-urlencoded', undefined, 'application/x-www-form-urlencoded; charset=latin-1'),
  'broken-multipart': fc.constantFrom(
    'multipart/form-data',
    'multipart/form-data; boundary=',
    'multipart/form-data; boundary=other',
    'multipart/form-data; boundary="----zcsFuzzBoundary"',
    'Multipart/Form-Data; boundary=----zcsFuzzBoundary',
    'multipart/form-data; boundary=----zcsFuzzBoundary; boundary=x',
    'multipart/mixed; boundary=----zcsFuzzBoundary',
  ),
  json: fc.constantFrom('application/json', 'application/json; charset=utf-8'),
  text: fc.constantFrom('text/plain', 'text/html; charset=iso-8859-1', 'application/octet-stream', ';;;', 'x/y; a="b'),
  'mixed-up': fc.constantFrom('multipart/form-data; boundary=----zcsFuzzBoundary', 'application/x-www-form-urlencoded'),
};

const caseArb: fc.Arbitrary<Case> = fc
  .record({
    route: fc.constantFrom<Route>('presence', 'presence', 'presence', 'presence-json', 'register', 'profile', 'passthrough'),
    params: fc.array(param, { maxLength: 8 }),
    inQuery: fc.array(fc.boolean(), { minLength: 8, maxLength: 8 }),
    encoding: fc.constantFrom<Encoding>(
      'urlencoded',
      'urlencoded',
      'multipart',
      'multipart',
      'query-only',
      'raw-bytes',
      'broken-multipart',
      'json',
      'text',
      'mixed-up',
    ),
    auth: fc.constantFrom<Auth>(
      'valid',
      'valid',
      'valid',
      'valid',
      'bot',
      'wrong-key',
      'unknown-user',
      'garbage',
      'empty',
      'bearer',
      'none',
      'twice',
      'cookie',
    ),
    user: fc.constantFrom(...HUMANS),
    host: fc.option(fc.constantFrom('realm-b.example', 'EXAMPLE.com:99', '[::1]:1', 'x'), { freq: 8, nil: undefined }),
    chunked: fc.boolean(),
    oversize: fc.oneof({ weight: 9, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 3 * LIMIT }) }),
    acceptGzip: fc.boolean(),
    requestId: fc.option(fc.oneof(fc.string({ maxLength: 140 }), fc.constantFrom('ok-id.1:2', 'a'.repeat(129))), {
      freq: 4,
      nil: undefined,
    }),
    seed: fc.integer(),
  })
  .chain((c) => CONTENT_TYPES[c.encoding].map((contentType) => ({ ...c, contentType: contentType ?? undefined })));

/** One content type of each encoding's (from CONTENT_TYPES), for the fixed cases. */
const FIXED_CONTENT_TYPE: Record<Encoding, string | undefined> = {
  urlencoded: 'application/x-www-form-urlencoded',
  multipart: 'multipart/form-data; boundary=----zcsFuzzBoundary',
  'query-only': undefined,
  'raw-bytes': 'application/x-www-form-urlencoded',
  'broken-multipart': 'multipart/form-data; boundary=other',
  json: 'application/json',
  text: 'text/plain',
  'mixed-up': 'multipart/form-data; boundary=----zcsFuzzBoundary',
};

/** Parameters the fixed cases take in turn: a full poll, a delta, absurd ids, odd names, a ping. */
const FIXED_PARAMS: Array<Array<[string, string]>> = [
  [
    ['status', 'active'],
    ['last_update_id', '-1'],
  ],
  [
    ['status', 'idle'],
    ['slim_presence', 'true'],
    ['last_update_id', '@id'],
  ],
  [
    ['status', 'active'],
    ['last_update_id', '1e400'],
    ['history_limit_days', '3'],
  ],
  [
    ['status', 'active'],
    ['ping_only', 'true'],
    ['', 'x'],
  ],
  [
    ['status', 'active'],
    ['last_update_id', '99999999999999999999'],
    ['new_user_input', 'maybe'],
  ],
  [
    ['status', 'active'],
    ['event_types', '["presence"]'],
    ['api_key', 'x'],
    ['queue_id', '%zz'],
  ],
  [
    ['status', 'active'],
    ['last_update_id', '@id+1'],
    ['last_update_id', '5'],
  ],
];

/**
 * Every route with every encoding, each credential, framing, size and parameter set in turn,
 * and the cases the generated runs once found: sent first on every run, so that no kind of
 * request depends on the draw (the generated runs after them vary everything).
 */
const FIXED_CASES: Case[] = [
  ...ROUTE_NAMES.flatMap((route, r) =>
    ENCODINGS.map((encoding, e): Case => {
      const i = r * ENCODINGS.length + e;
      return {
        route,
        encoding,
        params: FIXED_PARAMS[i % FIXED_PARAMS.length]!,
        inQuery: Array.from({ length: 8 }, (_, k) => (i + k) % 3 === 0),
        contentType: FIXED_CONTENT_TYPE[encoding],
        auth: AUTHS[i % AUTHS.length]!,
        user: HUMANS[i % HUMANS.length]!,
        host: i % 9 === 4 ? 'realm-b.example' : undefined,
        chunked: i % 2 === 1,
        oversize: i % 7 === 3 ? LIMIT : 0,
        acceptGzip: i % 3 === 1,
        requestId: i % 11 === 5 ? 'a'.repeat(129) : undefined,
        seed: i * 7919,
      };
    }),
  ),
  // A request line over Node's 16 KiB limit: 431 in Zulip's shape.
  wellFormedPresence(
    [
      ['status', 'active'],
      ['x', 'v'.repeat(20_000)],
    ],
    true,
  ),
  // A ping with a parameter nobody uses, named "": the answer may list it, sorted (P11).
  wellFormedPresence(
    [
      ['status', 'active'],
      ['ping_only', 'true'],
      ['', 'x'],
    ],
    false,
  ),
];

/** A well-formed presence poll from a user with valid credentials. */
function wellFormedPresence(params: Array<[string, string]>, inQuery: boolean): Case {
  return {
    route: 'presence',
    encoding: 'urlencoded',
    params,
    inQuery: Array.from({ length: 8 }, () => inQuery),
    contentType: FIXED_CONTENT_TYPE.urlencoded,
    auth: 'valid',
    user: HUMANS[0]!,
    host: undefined,
    chunked: false,
    oversize: 0,
    acceptGzip: false,
    requestId: undefined,
    seed: 1,
  };
}

/** `@id` tokens become real ids seen in earlier answers (deltas), or ids next to them. */
function resolveValue(v: string, seed: number): string {
  if (!v.startsWith('@id') || seenIds.length === 0) return v.startsWith('@id') ? '1' : v;
  const id = seenIds[Math.abs(seed) % seenIds.length]!;
  if (v === '@id+1') return String(id + 1);
  if (v === '@id-1') return String(id - 1);
  if (v === '@id*1000') return String(id * 1000);
  return String(id);
}

const BOUNDARY = '----zcsFuzzBoundary';

/** Some parts are file uploads, which neither the shim nor Zulip reads as parameters. */
const isFilePart = (seed: number, i: number) => (seed + i) % 7 === 0;

function multipart(params: Array<[string, string]>, seed: number): Buffer {
  const parts: Buffer[] = [];
  params.forEach(([k, v], i) => {
    const file = isFilePart(seed, i);
    const disposition = file ? `form-data; name="${k}"; filename="f${i}.txt"` : `form-data; name="${k}"`;
    parts.push(Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: ${disposition}\r\n\r\n`), Buffer.from(v), Buffer.from('\r\n'));
  });
  parts.push(Buffer.from(`--${BOUNDARY}--\r\n`));
  return Buffer.concat(parts);
}

const INVALID_UTF8 = [
  Buffer.from([0xff]),
  Buffer.from([0xc3, 0x28]),
  Buffer.from([0xe2, 0x82]),
  Buffer.from([0xed, 0xa0, 0x80]),
  Buffer.from([0xf8, 0x88, 0x80, 0x80, 0x80]),
];

function rawBytes(params: Array<[string, string]>, seed: number): Buffer {
  const out: Buffer[] = [];
  params.forEach(([k, v], i) => {
    if (i > 0) out.push(Buffer.from((seed + i) % 5 === 0 ? '&&' : '&'));
    out.push(Buffer.from(k), Buffer.from('='), Buffer.from(v.slice(0, 200)));
    out.push(INVALID_UTF8[Math.abs(seed + i) % INVALID_UTF8.length]!);
  });
  return Buffer.concat(out);
}

function bodyOf(c: Case, bodyParams: Array<[string, string]>): Buffer | undefined {
  switch (c.encoding) {
    case 'urlencoded':
      return Buffer.from(new URLSearchParams(bodyParams).toString());
    case 'multipart':
      return multipart(bodyParams, c.seed);
    case 'query-only':
      return undefined;
    case 'raw-bytes':
      return rawBytes(bodyParams, c.seed);
    case 'broken-multipart': {
      const whole = multipart(bodyParams, c.seed);
      const cut = Math.abs(c.seed) % (whole.length + 1);
      // Truncated, LF-only line ends, or whole but under a boundary the header does not name.
      if (c.seed % 3 === 0) return whole.subarray(0, cut);
      if (c.seed % 3 === 1) return Buffer.from(whole.toString('latin1').replace(/\r\n/g, '\n'), 'latin1');
      return whole;
    }
    case 'json':
      return Buffer.from(JSON.stringify(Object.fromEntries(bodyParams)));
    case 'text':
      return Buffer.from(new URLSearchParams(bodyParams).toString());
    case 'mixed-up':
      // The body is in the other encoding than the one named.
      return c.contentType?.startsWith('multipart')
        ? Buffer.from(new URLSearchParams(bodyParams).toString())
        : multipart(bodyParams, c.seed);
  }
}

const ROUTES: Record<Route, { method: string; path: string }> = {
  presence: { method: 'POST', path: '/api/v1/users/me/presence' },
  'presence-json': { method: 'POST', path: '/json/users/me/presence' },
  register: { method: 'POST', path: '/api/v1/register' },
  profile: { method: 'GET', path: '/api/v1/users/me' },
  passthrough: { method: 'POST', path: '/api/v1/messages' },
};

interface Built {
  out: Outgoing;
  /** The parameters as a well-formed request carries them (undefined when malformed). */
  effective: Map<string, string> | undefined;
  bodyReadByShim: boolean;
  tooLarge: boolean;
}

function build(c: Case): Built {
  const params = c.params.map(([k, v], i) => [k, resolveValue(v, c.seed + i)] as [string, string]);
  const query = params.filter((_, i) => c.inQuery[i] || c.encoding === 'query-only');
  const inBody = params.filter((_, i) => !(c.inQuery[i] || c.encoding === 'query-only'));
  const route = ROUTES[c.route];
  const qs = query.length ? `?${new URLSearchParams(query).toString()}` : '';
  let body = bodyOf(c, inBody);
  if (c.oversize > 0) body = Buffer.concat([body ?? Buffer.alloc(0), Buffer.from('&pad='), Buffer.alloc(LIMIT + c.oversize, 0x61)]);
  const headers: Record<string, string | string[]> = {};
  if (c.contentType !== undefined && body !== undefined) headers['content-type'] = c.contentType;
  const user = fake.user(c.user);
  switch (c.auth) {
    case 'valid':
      headers.authorization = fake.auth(c.user);
      break;
    case 'bot':
      headers.authorization = fake.auth(BOT);
      break;
    case 'wrong-key':
      headers.authorization = `Basic ${Buffer.from(`${user.email}:${WRONG_KEY}`).toString('base64')}`;
      break;
    case 'unknown-user':
      headers.authorization = `Basic ${Buffer.from(`nobody@example.com:${user.api_key}`).toString('base64')}`;
      break;
    case 'garbage':
      headers.authorization = `Basic !!${user.api_key}!!`;
      break;
    case 'empty':
      headers.authorization = 'Basic ';
      break;
    case 'bearer':
      headers.authorization = `Bearer ${BEARER}`;
      break;
    case 'twice':
      headers.authorization = [fake.auth(c.user), `Basic ${Buffer.from(`${user.email}:${WRONG_KEY}`).toString('base64')}`];
      break;
    case 'cookie':
      headers.cookie = `csrftoken=abc; sessionid=${encodeURIComponent(user.api_key)}`;
      break;
    case 'none':
      break;
  }
  if (c.host !== undefined) headers.host = c.host;
  if (c.acceptGzip) headers['accept-encoding'] = 'gzip, deflate';
  if (c.requestId !== undefined) {
    // Node's client refuses characters not allowed in a header value; those go raw elsewhere.
    const id = c.requestId.replace(/[^\t\x20-\x7e]/g, '');
    if (id) headers['x-request-id'] = id;
  } else {
    // A unique id the shim echoes: each answer can be matched to its own request.
    headers['x-request-id'] = `fuzz-${++requestSeq}`;
  }
  // Multipart is well-formed only with plain part names (a quote or CR/LF breaks the header).
  const wellFormed =
    c.encoding === 'urlencoded' || c.encoding === 'query-only' || (c.encoding === 'multipart' && inBody.every(([k]) => /^\w+$/.test(k)));
  const bodyFields =
    c.encoding === 'multipart' ? inBody.filter((_, i) => !isFilePart(c.seed, i)) : c.encoding === 'query-only' ? [] : inBody;
  const tooLarge = (body?.length ?? 0) > LIMIT;
  return {
    out: { method: route.method, path: `${route.path}${qs}`, headers, body, chunked: c.chunked && body !== undefined },
    effective: wellFormed && !tooLarge ? new Map([...query, ...bodyFields]) : undefined,
    bodyReadByShim: c.route !== 'profile' && c.route !== 'passthrough',
    tooLarge,
  };
}

// ------------------------------------------------------------------ judging an answer

/** E3 as a modern server words it, for a value the shim validates; undefined when valid. */
function e3Message(name: string, raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return `${name} is not valid JSON`;
  }
  return typeof v === 'number' && Number.isInteger(v) && !/[.eE]/.test(raw) ? undefined : `${name} is not an integer`;
}

const SHIM_CODES = new Set([
  'BAD_REQUEST',
  'UPSTREAM_UNAVAILABLE',
  'UPSTREAM_TIMEOUT',
  'UPSTREAM_BAD_RESPONSE',
  'REPLAY_MISS',
  'SHIM_INTERNAL_ERROR',
]);

function decodedBody(a: Answer): Buffer {
  return a.headers['content-encoding'] === 'gzip' ? gunzipSync(a.body) : a.body;
}

/** A shim error in Zulip's shape: exactly result, msg and code. */
function expectShimError(a: Answer, why: string): { msg: string; code: string } {
  expect(a.headers['content-type'] ?? '', `${why} ${JSON.stringify(a.headers)}`).toMatch(/^application\/json/);
  const body = JSON.parse(decodedBody(a).toString('utf8')) as Record<string, unknown>;
  expect(Object.keys(body).sort(), why).toEqual(['code', 'msg', 'result']);
  expect(body.result, why).toBe('error');
  expect(typeof body.msg, why).toBe('string');
  expect(SHIM_CODES.has(body.code as string), why).toBe(true);
  // P13: an error the shim words never repeats a credential.
  expect(findSecret(decodedBody(a).toString('latin1')), why).toBeUndefined();
  return body as { msg: string; code: string };
}

type Modern = Record<string, { active_timestamp: number; idle_timestamp: number }>;

/** A JSON `true`, as Zulip reads a boolean parameter. */
function jsonTrue(raw: string | undefined): boolean {
  try {
    return raw !== undefined && JSON.parse(raw) === true;
  } catch {
    return false;
  }
}

function judge(c: Case, b: Built, a: Answer): void {
  const why = `${b.out.method} ${b.out.path.slice(0, 120)} (${c.encoding}, ${c.contentType}, auth ${c.auth}, oversize ${c.oversize}) → ${a.status} ${decodedBody(a).toString('utf8').slice(0, 200)}`;
  const fromUpstream = a.headers['x-fake-zulip'] === 'yes';

  // Node's 16 KiB limit on the request line and headers: 431, in Zulip's shape (E2).
  const headerBytes = b.out.path.length + Object.entries(b.out.headers ?? {}).reduce((n, [k, v]) => n + k.length + String(v).length + 4, 0);
  if (headerBytes > 16_384 + 512) {
    expect(a.status, why).toBe(431);
    expect(expectShimError(a, why).code, why).toBe('BAD_REQUEST');
    return;
  }
  // Every answer belongs to its own request (no answer crosses to another on a kept-alive connection).
  const ownId = b.out.headers?.['x-request-id'];
  if (typeof ownId === 'string' && ownId.startsWith('fuzz-') && a.status !== 431) expect(a.headers['x-request-id'], why).toBe(ownId);
  if (a.status === 431) {
    expect(headerBytes, why).toBeGreaterThan(16_384 - 1024);
    // Just under the shim's limit, the request plus X-Forwarded-* may be over the upstream's:
    // then the upstream's own bare 431 comes back (E1), from before the fake could mark it.
    if (!fromUpstream && a.body.length === 0 && !a.headers['content-type']) return;
    expect(expectShimError(a, why).code, why).toBe('BAD_REQUEST');
    return;
  }

  if (b.bodyReadByShim && b.tooLarge) {
    // E2: over the limit → 413 in Zulip's shape, and the connection is closed.
    expect(a.status, why).toBe(413);
    expect(fromUpstream, why).toBe(false);
    expect(expectShimError(a, why).code, why).toBe('BAD_REQUEST');
    expect(a.headers.connection, why).toBe('close');
    return;
  }

  const isPresence = c.route === 'presence' || c.route === 'presence-json';
  const expectedE3 =
    isPresence && b.effective
      ? (e3Message('history_limit_days', b.effective.get('history_limit_days')) ??
        e3Message('last_update_id', b.effective.get('last_update_id')))
      : undefined;
  if (expectedE3) {
    // E3: rejected by the shim before any upstream call, in the modern server's words.
    expect(fromUpstream, why).toBe(false);
    expect(a.status, why).toBe(400);
    expect(expectShimError(a, why), why).toEqual({ msg: expectedE3, code: 'BAD_REQUEST', result: 'error' });
    return;
  }

  if (!fromUpstream) {
    // Only a client's own error is the shim's to answer with a healthy upstream: 400 (E3, a
    // malformed body) or 431 (headers too large). Never 5xx.
    const err = expectShimError(a, why);
    expect([400, 431], why).toContain(a.status);
    expect(err.code, why).toBe('BAD_REQUEST');
    if (a.status === 400 && b.effective && isPresence) expect.fail(`a well-formed request got a shim error: ${why}`);
    return;
  }

  // The upstream's answer (E1), or its success as the shim rewrote it.
  if (a.status < 200 || a.status >= 300) return;
  const body = JSON.parse(decodedBody(a).toString('utf8')) as Record<string, unknown>;
  expect(body.result, why).toBe('success');
  if (!isPresence) return;
  if (body.presences === undefined) {
    // P8: only a ping_only=true poll answers without presence data.
    if (b.effective) expect(jsonTrue(b.effective.get('ping_only')), why).toBe(true);
    // P11 holds for a ping too: parameters nobody uses (an odd name such as "") are listed, sorted.
    const { ignored_parameters_unsupported: ignored, ...rest } = body;
    expect(Object.keys(rest).sort(), why).toEqual(['msg', 'result']);
    if (ignored !== undefined) {
      expect(Array.isArray(ignored) && ignored.every((n) => typeof n === 'string'), why).toBe(true);
      expect(ignored, why).toEqual([...(ignored as string[])].sort());
    }
    return;
  }
  // P4, P10: every non-ping answer has an integer id and the upstream's server_timestamp.
  const id = body.presence_last_update_id;
  expect(Number.isInteger(id), why).toBe(true);
  // A register before 5.0 is dated by its Date header, at the end of that second (P6).
  if (body.server_timestamp !== fake.now) expect(body.server_timestamp, why).toBe(Math.floor(fake.now) + 0.999);
  if ((id as number) > 0) seenIds.push(id as number);
  if (seenIds.length > 50) seenIds.splice(0, seenIds.length - 50);
  const presences = body.presences as Record<string, unknown>;
  const keys = Object.keys(presences);
  const modern = keys.length > 0 ? /^\d+$/.test(keys[0]!) : undefined;
  if (modern) {
    // P2: both timestamps, integers, idle >= active.
    for (const e of Object.values(presences as Modern)) {
      expect(Number.isInteger(e.active_timestamp) && Number.isInteger(e.idle_timestamp), why).toBe(true);
      expect(e.idle_timestamp, why).toBeGreaterThanOrEqual(e.active_timestamp);
    }
  }
  if (!b.effective || b.effective.has('history_limit_days')) return;
  const luid = b.effective.get('last_update_id');
  const x = luid === undefined ? undefined : Number(JSON.parse(luid));
  // An id beyond 2^53 is only ever the client's own, echoed (P4).
  if (!Number.isSafeInteger(id)) expect(id, why).toBe(x);
  const wantsModern = x !== undefined || jsonTrue(b.effective.get('slim_presence'));
  // P1: the format asked for.
  if (keys.length) expect(modern, why).toBe(wantsModern);
  // P3, P5: no id, a non-positive one, or one no ledger could have issued → the full map.
  const unvouchable = x === undefined || x <= 0 || x < 1e12 || !Number.isSafeInteger(x);
  if (unvouchable) {
    const expected = wantsModern ? HUMANS.map(String) : HUMANS.map((u) => fake.user(u).email);
    expect(keys.sort(), why).toEqual(expected.sort());
  }
}

async function exchange(c: Case): Promise<void> {
  const b = build(c);
  // Oversize bodies end with the connection: off the kept-alive pool.
  const a = await send(shim.url, b.out, { agent: b.tooLarge ? false : agent, timeoutMs: REQUEST_TIMEOUT_MS });
  sent++;
  judge(c, b, a);
}

async function healthy(): Promise<void> {
  const a = await send(shim.url, { method: 'GET', path: '/healthz' }, { agent, timeoutMs: REQUEST_TIMEOUT_MS });
  expect(a.status).toBe(200);
}

// ------------------------------------------------------------------ raw requests

const RAW_TARGETS = [
  '/api/v1/users/me/presence',
  '/json/users/me/presence',
  '/api/v1/register',
  '/api/v1/users/me',
  '/api/v1/messages',
  '/healthz',
];

interface RawCase {
  method: string;
  target: string;
  header: string;
  value: string;
  auth: boolean;
  body: string;
}

const rawValue = fc.oneof(
  fc.constantFrom(
    'a\rb',
    'a\nInjected: yes',
    'a\r\nInjected: yes',
    'a\r\n folded',
    'a\u0000b',
    'a\u007fb',
    '\u00ff\u00fe',
    ' x ',
    '',
    '-1',
    '99999999999999999999',
    'multipart/form-data; boundary=\r\n',
  ),
  fc.string({ unit: 'binary-ascii', maxLength: 30 }),
);

/**
 * Framing headers only with values that cannot leave the server waiting for body bytes the
 * client never sends (that wait is a slow client, not bad input).
 */
const rawHeader: fc.Arbitrary<[string, string]> = fc.oneof(
  fc.tuple(
    fc.constantFrom<string>('X-Zulip-Test', 'Authorization', 'Content-Type', 'Host', 'X-Request-Id', 'Cookie', 'Bad Name', ''),
    rawValue,
  ),
  fc.tuple(
    fc.constant<string>('Content-Length'),
    fc.constantFrom<string>('-1', 'abc', '1, 2', '0x10', '', ' ', '1\r\nContent-Length: 2', '\u00001'),
  ),
  fc.tuple(
    fc.constant<string>('Transfer-Encoding'),
    fc.constantFrom<string>('chunked, chunked', 'xchunked', 'identity', 'gzip', 'chunked\r\nTransfer-Encoding: x', ''),
  ),
);

const rawCaseArb: fc.Arbitrary<RawCase> = fc
  .record({
    method: fc.constantFrom('GET', 'POST', 'POST', 'PUT', 'OPTIONS', 'CONNECT', 'G\u00c9T', 'get'),
    target: fc.oneof(
      fc.constantFrom(...RAW_TARGETS),
      fc.constantFrom(
        '*',
        'http://evil.example/api/v1/users/me',
        '//x',
        '/%',
        '/a b',
        'api/v1/users/me',
        '/\u00e9',
        '/api/v1/users/me/presence?last_update_id=1e400&status=active',
        '/api/v1/users/me/presence#f',
      ),
    ),
    header: rawHeader,
    auth: fc.boolean(),
    body: fc.constantFrom('', 'status=active', 'status=active&last_update_id=-1', 'status=idle&last_update_id=%ff'),
  })
  .map(({ header: [header, value], ...r }) => ({ ...r, header, value }));

function rawRequest(r: RawCase, port: number): Buffer {
  const lines = [`${r.method} ${r.target} HTTP/1.1`, `Host: 127.0.0.1:${port}`];
  if (r.auth) lines.push(`Authorization: ${fake.auth(10)}`);
  lines.push(`${r.header}: ${r.value}`);
  if (r.header !== 'Content-Length' && r.header !== 'Transfer-Encoding') {
    lines.push('Content-Type: application/x-www-form-urlencoded', `Content-Length: ${Buffer.byteLength(r.body)}`);
  }
  return Buffer.from(`${lines.join('\r\n')}\r\n\r\n${r.body}`, 'latin1');
}

function judgeRaw(r: RawCase, a: Awaited<ReturnType<typeof sendRaw>>): void {
  const why = `${JSON.stringify(`${r.method} ${r.target} / ${r.header}: ${r.value}`)} → ${a.bytes.toString('latin1').slice(0, 300)}`;
  expect(a.status, `no answer: ${why}`).toBeGreaterThan(0);
  if (a.headers['x-fake-zulip'] === 'yes') return;
  if (r.target === '/healthz' && a.status === 200) return;
  // Everything else is the shim's own error, in Zulip's shape.
  expect(a.headers['content-type'] ?? '', why).toMatch(/^application\/json/);
  const body = JSON.parse(a.body.toString('utf8')) as Record<string, unknown>;
  expect(Object.keys(body).sort(), why).toEqual(['code', 'msg', 'result']);
  expect(body.result, why).toBe('error');
  expect(a.status, why).toBeGreaterThanOrEqual(400);
  expect(a.status, why).toBeLessThan(500);
}

// ------------------------------------------------------------------ P6 afterwards

type Entry = { active_timestamp: number; idle_timestamp: number };

/** What a modern server would show for the 2.1 fake's per-client rows (P2). */
function expectedModern(): Map<string, Entry> {
  const out = new Map<string, Entry>();
  const cutoff = fake.now - 14 * 86_400;
  for (const id of HUMANS) {
    const rows = [...(fake.clientRows.get(id)?.values() ?? [])].filter((r) => r.timestamp >= cutoff);
    if (!rows.length) continue;
    const idle = Math.max(...rows.map((r) => r.timestamp));
    const actives = rows.filter((r) => r.status === 'active').map((r) => r.timestamp);
    const joined = Math.floor(Date.parse(fake.user(id).date_joined) / 1000);
    const active = actives.length ? Math.max(...actives) : Math.min(joined, idle);
    out.set(String(id), { active_timestamp: active, idle_timestamp: Math.max(idle, active) });
  }
  return out;
}

interface Client {
  user: number;
  map: Map<string, Entry>;
  lastId: number;
}

async function form(path: string, user: number, params: Record<string, string>): Promise<Record<string, unknown>> {
  const a = await send(
    shim.url,
    {
      method: 'POST',
      path,
      headers: { authorization: fake.auth(user), 'content-type': 'application/x-www-form-urlencoded' },
      body: Buffer.from(new URLSearchParams(params).toString()),
    },
    { agent, timeoutMs: REQUEST_TIMEOUT_MS },
  );
  expect(a.status, a.body.toString()).toBe(200);
  return jsonOf(a) as Record<string, unknown>;
}

async function registerClient(user: number): Promise<Client> {
  const r = await form('/api/v1/register', user, { slim_presence: 'true', event_types: '["presence"]', fetch_event_types: '["presence"]' });
  const map = new Map(Object.entries(r.presences as Modern));
  return { user, map, lastId: r.presence_last_update_id as number };
}

async function pollClient(c: Client): Promise<void> {
  const r = await form('/api/v1/users/me/presence', c.user, { status: 'active', last_update_id: String(c.lastId) });
  for (const [k, v] of Object.entries(r.presences as Modern)) c.map.set(k, v);
  expect(r.presence_last_update_id as number).toBeGreaterThanOrEqual(c.lastId > 0 ? c.lastId : -1);
  c.lastId = r.presence_last_update_id as number;
}

/** fast-check's report with long generated values cut, so a failure stays readable. */
function compactReporter<T>(out: fc.RunDetails<T>): void {
  if (!out.failed) return;
  const shorten = (text: string, max: number) => {
    const cut = text.replace(/(.)\1{40,}/g, (run, ch: string) => `${ch.repeat(8)}…(${run.length} × ${JSON.stringify(ch)})`);
    return cut.length > max ? `${cut.slice(0, max)}…` : cut;
  };
  const cause = out.errorInstance instanceof Error ? out.errorInstance.message : String(out.errorInstance);
  throw new Error(`${shorten(cause, 3000)}\n\n${shorten(fc.defaultReportMessage(out) ?? '', 4000)}`);
}

// ------------------------------------------------------------------ the tests

/**
 * A fake and a shim of the calling file's own, with this module's counters reset: hooks
 * registered per call, not at the module's top level, so that each file using the suite gets
 * them even where test files share loaded modules.
 */
function freshTarget(): void {
  beforeAll(async () => {
    seenIds.length = 0;
    sent = 0;
    fake = await startFake({ era: '2.1' });
    for (const id of HUMANS) fake.report(id, 'active');
    // Every answer the fake makes is marked, so an answer can be told to be the upstream's (E1).
    fake.override = (_req, res) => {
      res.setHeader('x-fake-zulip', 'yes');
      fake.seen.length = 0; // bounded memory over thousands of requests
      return false;
    };
    // The fuzzer stands where a proxy would (a trusted peer): its X-Request-Id is kept, and each
    // answer must carry its own request's.
    shim = await startShim(fake.url, {
      server: { bodyLimitBytes: LIMIT, trustProxy: ['127.0.0.1', '::1'] },
      presence: { coalesceMs: 50 },
      upstream: { timeoutMs: 15_000 },
    });
    agent = new http.Agent({ keepAlive: true, maxSockets: 24 });
  });

  afterAll(async () => {
    agent?.destroy();
    await shim?.close();
    await fake?.stop();
  });
}

/**
 * The tests, as part `part` of `parts`: each part sends its share of the generated requests to a
 * shim of its own (one test file each, so the parts run side by side); the hand-written cases,
 * and P6 after everything, run in the first part.
 */
export function fuzzSuite(part: number, parts: number): void {
  const runs = Math.ceil(RUNS / parts);
  freshTarget();
  describe(`bad input never breaks the shim (E1–E4, P13), part ${part} of ${parts}`, () => {
    it(`answers ${runs * 40}+ generated requests with the upstream answer or a Zulip-shaped shim error`, async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(caseArb, { minLength: 40, maxLength: 48, size: 'max' }), async (cases) => {
          await Promise.all(cases.map(exchange));
          await healthy();
        }),
        {
          numRuns: runs,
          examples: part === 1 ? [[FIXED_CASES]] : [],
          reporter: compactReporter,
          interruptAfterTimeLimit: 150_000,
          markInterruptAsFailure: true,
        },
      );
      expect(sent).toBeGreaterThanOrEqual(runs * 40);
      console.log(`fuzz: ${sent} generated requests answered`);
      // No handler failed unexpectedly along the way (those would be 500s).
      expect(shim.logs.filter((l) => l.includes('unexpected error')).slice(0, 3)).toEqual([]);
    }, 240_000);

    if (part === 1) {
      it('answers raw requests with CR/LF and NUL in header values and odd request targets in Zulip shape', async () => {
        const port = Number(new URL(shim.url).port);
        await fc.assert(
          fc.asyncProperty(fc.array(rawCaseArb, { minLength: 10, maxLength: 20 }), async (cases) => {
            const answers = await Promise.all(cases.map((r) => sendRaw(shim.url, rawRequest(r, port), REQUEST_TIMEOUT_MS)));
            for (const [i, r] of cases.entries()) judgeRaw(r, answers[i]!);
            sent += cases.length;
            await healthy();
          }),
          { numRuns: 60, reporter: compactReporter, interruptAfterTimeLimit: 60_000, markInterruptAsFailure: true },
        );
      }, 120_000);

      it('answers a request target the pass-through cannot send on (OPTIONS *) with 400, not 502', async () => {
        const a = await sendRaw(
          shim.url,
          Buffer.from(`OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${fake.auth(10)}\r\n\r\n`),
          REQUEST_TIMEOUT_MS,
        );
        expect(a.status).toBe(400);
        expect(JSON.parse(a.body.toString())).toMatchObject({ result: 'error', code: 'BAD_REQUEST' });
        await healthy();
      });

      it('answers a body over the limit with 413 at once and closes the connection once the client stops sending', async () => {
        for (const framing of ['content-length', 'chunked'] as const) {
          // Headers and a first piece only: the rest of the declared body is never sent.
          const head = [
            'POST /api/v1/users/me/presence HTTP/1.1',
            `Host: 127.0.0.1`,
            `Authorization: ${fake.auth(10)}`,
            'Content-Type: application/x-www-form-urlencoded',
            framing === 'chunked' ? 'Transfer-Encoding: chunked' : `Content-Length: ${LIMIT * 100}`,
          ].join('\r\n');
          const piece = framing === 'chunked' ? `${(LIMIT + 10).toString(16)}\r\n${'a'.repeat(LIMIT + 10)}\r\n` : 'status=active&x=';
          // Resolves only once the server has closed the connection, which the client never ends.
          const a = await sendRaw(shim.url, Buffer.from(`${head}\r\n\r\n${piece}`), REQUEST_TIMEOUT_MS, { untilClosed: true });
          expect(a.closed).toBe(true);
          expect(a.status).toBe(413);
          expect(JSON.parse(a.body.toString())).toEqual({
            result: 'error',
            msg: `Request body too large (limit ${LIMIT} bytes)`,
            code: 'BAD_REQUEST',
          });
          expect(a.headers.connection).toBe('close');
        }
      });

      it('answers a multipart body cut inside a file part with 400, and does not crash (E4)', async () => {
        const body = Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="f"; filename="a.txt"\r\n\r\npartial file conte`);
        for (const path of ['/api/v1/users/me/presence', '/api/v1/register']) {
          const a = await send(
            shim.url,
            {
              method: 'POST',
              path,
              headers: { authorization: fake.auth(10), 'content-type': `multipart/form-data; boundary=${BOUNDARY}` },
              body,
            },
            { agent, timeoutMs: REQUEST_TIMEOUT_MS },
          );
          expect([a.status, jsonOf(a)]).toEqual([400, { result: 'error', msg: 'Malformed multipart/form-data body', code: 'BAD_REQUEST' }]);
        }
        await healthy();
      });

      it('reads absurd last_update_id values as a modern server does (E3, P3, P5)', async () => {
        const cases: Array<[string, number | string]> = [
          ['-1', 200],
          ['-0', 200],
          ['0', 200],
          ['-9223372036854775809', 200],
          ['9223372036854775808', 200],
          ['99999999999999999999', 200],
          ['1e400', 'last_update_id is not an integer'],
          ['1e3', 'last_update_id is not an integer'],
          ['1.5', 'last_update_id is not an integer'],
          ['true', 'last_update_id is not an integer'],
          ['"5"', 'last_update_id is not an integer'],
          ['9'.repeat(5000), 'last_update_id is not an integer'],
          ['abc', 'last_update_id is not valid JSON'],
          ['', 'last_update_id is not valid JSON'],
          ['05', 'last_update_id is not valid JSON'],
        ];
        for (const [raw, expected] of cases) {
          const a = await send(
            shim.url,
            {
              method: 'POST',
              path: '/api/v1/users/me/presence',
              headers: { authorization: fake.auth(11), 'content-type': 'application/x-www-form-urlencoded' },
              body: Buffer.from(new URLSearchParams({ status: 'active', last_update_id: raw }).toString()),
            },
            { agent, timeoutMs: REQUEST_TIMEOUT_MS },
          );
          const body = jsonOf(a) as Record<string, unknown>;
          if (typeof expected === 'string') {
            expect([a.status, body], raw.slice(0, 30)).toEqual([400, { result: 'error', msg: expected, code: 'BAD_REQUEST' }]);
          } else {
            // Never vouched for: the full map (P3, P5).
            expect(a.status, raw.slice(0, 30)).toBe(200);
            expect(Object.keys(body.presences as object).sort(), raw.slice(0, 30)).toEqual(HUMANS.map(String));
          }
        }
      });

      it('afterwards, ordinary clients still get every update (P6)', async () => {
        const realmKey = await realmKeyOf(shim, fake.url, new URL(shim.url).host);
        // The ledger the generated requests left behind is the one these clients continue from.
        expect(await shim.shim.context.store.load(realmKey)).toBeDefined();
        // The coalescing window on a clock of the test's own, so a poll is inside it or past it as
        // the test says, however slow the machine: the clock stands at the end of the window opened
        // at `windowStart`; snapshots fetched before that are stale, those fetched since are fresh.
        const WINDOW_MS = 60_000;
        let windowStart = Date.now();
        shim.shim.context.snapshots = snapshotHub(WINDOW_MS, 64, () => windowStart + WINDOW_MS);
        const windowPasses = () => {
          windowStart = Date.now();
        };
        const clients = await Promise.all([10, 11, 12, 13].map(registerClient));
        const rng = fc.sample(fc.integer({ min: 0, max: 1_000_000 }), { numRuns: 200, seed: 42 });
        let k = 0;
        const next = (n: number) => rng[k++ % rng.length]! % n;
        for (let round = 0; round < 8; round++) {
          fake.advance(30 + next(400));
          for (let i = 0; i < 3; i++) {
            const user = HUMANS[next(HUMANS.length)]!;
            const what = next(5);
            if (what === 0) fake.setPresenceEnabled(user, false);
            else if (what === 1) fake.setPresenceEnabled(user, true);
            else fake.report(user, what === 2 ? 'idle' : 'active', what === 4 ? 'ZulipMobile' : 'website');
          }
          // Some polls inside the coalescing window, some after it.
          if (round % 2 === 0) windowPasses();
          await Promise.all(clients.map(pollClient));
        }
        // Quiet upstream: two more rounds past the window let every change through.
        for (let i = 0; i < 2; i++) {
          windowPasses();
          await Promise.all(clients.map(pollClient));
        }
        const expected = expectedModern();
        for (const c of clients) {
          expect(new Map([...c.map].filter(([k]) => expected.has(k))), `client of user ${c.user}`).toEqual(expected);
          expect([...c.map.keys()].every((k) => expected.has(k))).toBe(true);
        }
      });
    }
  });
}
