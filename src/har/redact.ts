import { LRUCache } from 'lru-cache';

/**
 * H1, P13: credentials never reach a recording. Every secret gets a stable placeholder,
 * `[redacted-N]`, the same one for the same secret anywhere in the file (while it is among the
 * last 10,000 distinct secrets, X2), so a recording can be shared and still tells different
 * callers apart.
 *
 * Two layers:
 * - structural: the places credentials live in Zulip traffic (Authorization, Cookie,
 *   Set-Cookie, X-CSRFToken; `api_key`, `password`, `token` in queries, form and multipart
 *   bodies, and as JSON keys, e.g. the answer of fetch_api_key) are replaced whatever their
 *   length;
 * - textual: every secret of LONG_SECRET characters or more is also replaced wherever else it
 *   shows up (an echoed header, a body), in its raw, URL-encoded, form-encoded, JSON-escaped
 *   and base64 forms. Shorter ones would match ordinary text, so only the structural layer
 *   applies to them.
 */

const LONG_SECRET = 8;
/** Bytes read at a time by mayHold(). */
const HOLD_WINDOW = 64 * 1024;

/** A JSON text that may hold a secret key (isSecretName), possibly escaped: cheap pre-check. */
const SECRET_KEY_HINT = /api_key|token|password|\\u/i;

/** Parameter (and JSON key) names whose values are credentials. */
export function isSecretName(name: string): boolean {
  const n = name.toLowerCase();
  return n === 'api_key' || n === 'token' || n === 'csrfmiddlewaretoken' || n.endsWith('password');
}

/** Decodes one form-urlencoded component; a malformed escape is kept as written. */
function decodeFormComponent(s: string): string {
  const spaced = s.replace(/\+/g, ' ');
  try {
    return decodeURIComponent(spaced);
  } catch {
    return spaced;
  }
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * The base64 characters that spell `secret` wherever it sits inside a larger base64 text (a
 * `Basic` credential `email:key`, an echoed blob): for each of the three byte offsets modulo 3,
 * only the characters made of the secret's own bits, without those shared with a neighbour byte.
 */
function base64Cores(secret: Buffer, alphabet: 'base64' | 'base64url'): string[] {
  const out: string[] = [];
  for (const offset of [0, 1, 2]) {
    const text = Buffer.concat([Buffer.alloc(offset), secret])
      .toString(alphabet)
      .replace(/=+$/, '');
    // Characters holding filler bits before the secret: none, 2 (1 byte before), 3 (2 bytes before).
    const head = [0, 2, 3][offset]!;
    // The last character mixes in bits of the byte after, unless the secret ends a 3-byte group.
    const tail = (offset + secret.length) % 3 === 0 ? 0 : 1;
    out.push(text.slice(head, text.length - tail));
  }
  return out;
}

/** The spellings a secret takes on the wire and in bodies. */
function spellings(secret: string): string[] {
  const bytes = Buffer.from(secret, 'utf8');
  const forms = new Set<string>([
    secret,
    encodeURIComponent(secret),
    new URLSearchParams([['', secret]]).toString().slice(1),
    JSON.stringify(secret).slice(1, -1),
    bytes.toString('base64'),
    bytes.toString('base64url'),
    ...base64Cores(bytes, 'base64'),
    ...base64Cores(bytes, 'base64url'),
  ]);
  return [...forms].filter((f) => f.length >= LONG_SECRET);
}

/**
 * X2, X8: what the redactor remembers is bounded, so a client sending a new secret with every
 * request (spraying credentials) cannot grow a recording shim's memory or slow every request
 * down. A secret keeps its placeholder while it is among the last PLACEHOLDERS_KEPT distinct
 * ones (met again later, it gets a new one); the textual layer covers the last
 * TEXTUAL_SECRETS long ones. The structural layer, where credentials live, has no such limit.
 */
const PLACEHOLDERS_KEPT = 10_000;
const TEXTUAL_SECRETS = 64;

export class Redactor {
  private readonly placeholders = new LRUCache<string, string>({ max: PLACEHOLDERS_KEPT });
  /** Long secrets of the textual layer, most recent last, with their placeholders. */
  private readonly textual = new LRUCache<string, string>({
    max: TEXTUAL_SECRETS,
    dispose: () => {
      this.pattern = undefined;
    },
  });
  private spelled = new Map<string, string>();
  private pattern: RegExp | undefined;
  private allocated = 0;
  /** Grows whenever a secret joins the textual layer: older scrubs may have missed it. */
  generation = 0;

  /** The placeholder of a secret, allocated on first sight. */
  placeholder(secret: string): string {
    let p = this.placeholders.get(secret);
    if (p) {
      // Seen again: back among the recent ones of the textual layer.
      if (secret.length >= LONG_SECRET && !this.textual.has(secret)) {
        this.textual.set(secret, p);
        this.pattern = undefined;
        this.generation++;
      }
      return p;
    }
    p = `[redacted-${++this.allocated}]`;
    this.placeholders.set(secret, p);
    if (secret.length >= LONG_SECRET) {
      this.textual.set(secret, p);
      this.pattern = undefined;
      this.generation++;
    }
    return p;
  }

  /** A header value with its credential replaced; other headers unchanged. */
  header(name: string, value: string): string {
    switch (name.toLowerCase()) {
      case 'authorization':
      case 'proxy-authorization':
        return this.authorization(value);
      case 'cookie':
        return value
          .split(';')
          .map((c) => this.cookiePair(c))
          .join(';');
      case 'set-cookie': {
        const semi = value.indexOf(';');
        return semi < 0 ? this.cookiePair(value) : this.cookiePair(value.slice(0, semi)) + value.slice(semi);
      }
      case 'x-csrftoken':
        return value ? this.placeholder(value) : value;
      default:
        return value;
    }
  }

  /** `Basic <token>` → `Basic [redacted-N]`: the scheme stays, one placeholder per credential. */
  private authorization(value: string): string {
    const m = /^(\S+)(\s+)(.+)$/s.exec(value);
    if (!m) return value ? this.placeholder(value) : value;
    const [, scheme, space, credential] = m as unknown as [string, string, string, string];
    if (scheme.toLowerCase() === 'basic') {
      // The API key inside email:key is a secret of its own (it may be echoed elsewhere).
      const decoded = Buffer.from(credential, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      if (colon >= 0 && colon < decoded.length - 1) this.placeholder(decoded.slice(colon + 1));
    }
    return `${scheme}${space}${this.placeholder(credential)}`;
  }

  private cookiePair(pair: string): string {
    const eq = pair.indexOf('=');
    if (eq < 0) return pair.trim() ? pair.replace(pair.trim(), this.placeholder(pair.trim())) : pair;
    const value = pair.slice(eq + 1).trim();
    return value ? `${pair.slice(0, eq)}=${this.placeholder(value)}` : pair;
  }

  /** Decoded name/value pairs with secret values replaced. */
  pairs<T extends { name: string; value?: string }>(pairs: T[]): T[] {
    return pairs.map((p) => (p.value && isSecretName(p.name) ? { ...p, value: this.placeholder(p.value) } : p));
  }

  /** A raw query string or form-urlencoded body with secret values replaced, the rest as written. */
  form(raw: string): string {
    return raw
      .split('&')
      .map((piece) => {
        const eq = piece.indexOf('=');
        if (eq < 0) return piece;
        const value = piece.slice(eq + 1);
        if (!value || !isSecretName(decodeFormComponent(piece.slice(0, eq)))) return piece;
        // Percent-encoded, so the URL stays a valid RFC 3986 URL and the form decodes to it.
        return `${piece.slice(0, eq)}=${encodeURIComponent(this.placeholder(decodeFormComponent(value)))}`;
      })
      .join('&');
  }

  /** A multipart body's text with the values of secret fields replaced. */
  multipart(text: string, fields: ReadonlyArray<readonly [string, string]>): string {
    let out = text;
    for (const [name, value] of fields) {
      if (!value || !isSecretName(name)) continue;
      const re = new RegExp(
        `(name="${escapeRegExp(name)}"[^\\r\\n]*\\r\\n(?:[^\\r\\n]+\\r\\n)*\\r\\n)${escapeRegExp(value)}(?=\\r\\n)`,
        'g',
      );
      out = out.replace(re, (_m, head: string) => head + this.placeholder(value));
    }
    return out;
  }

  /**
   * A JSON text with the string values of secret keys replaced, keeping its formatting; when
   * the text escapes them in an unusual way it is re-serialised instead.
   */
  json(text: string): string {
    // Most bodies name no credential at all: not worth parsing.
    if (!SECRET_KEY_HINT.test(text)) return text;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return text;
    }
    const found: Array<[string, string]> = [];
    const redacted = walkSecrets(parsed, (key, value) => {
      found.push([key, value]);
      return this.placeholder(value);
    });
    if (found.length === 0) return text;
    let out = text;
    for (const [key, value] of found) {
      const re = new RegExp(
        `("${escapeRegExp(JSON.stringify(key).slice(1, -1))}"\\s*:\\s*")${escapeRegExp(JSON.stringify(value).slice(1, -1))}"`,
        'g',
      );
      out = out.replace(re, (_m, head: string) => `${head}${this.placeholder(value)}"`);
    }
    let left = false;
    try {
      walkSecrets(JSON.parse(out), (_k, v) => {
        if (!/^\[redacted-\d+\]$/.test(v)) left = true;
        return v;
      });
    } catch {
      left = true;
    }
    return left ? JSON.stringify(redacted) : out;
  }

  /**
   * Whether UTF-8 bytes may hold a secret: a secret key's name (json()) or a long secret's
   * spelling (scrub()). Read in windows that overlap by the longest spelling, so a body with
   * none is never decoded into one string (X8).
   */
  mayHold(bytes: Buffer): boolean {
    const pattern = this.textual.size > 0 ? this.textualPattern() : undefined;
    let longest = 16;
    for (const f of this.spelled.keys()) longest = Math.max(longest, f.length);
    const overlap = longest * 4;
    for (let start = 0; start < bytes.length; start += HOLD_WINDOW) {
      let from = Math.max(0, start - overlap);
      while (from > 0 && (bytes[from]! & 0xc0) === 0x80) from--; // a character's first byte
      const text = bytes.toString('utf8', from, Math.min(bytes.length, start + HOLD_WINDOW));
      if (SECRET_KEY_HINT.test(text) || (pattern && text.search(pattern) >= 0)) return true;
    }
    return false;
  }

  /** Replaces every long secret seen so far, in any of its spellings, in a string. */
  scrub(s: string): string {
    if (this.textual.size === 0 || s.length < LONG_SECRET) return s;
    const pattern = this.textualPattern();
    return s.replace(pattern, (m) => this.spelled.get(m) ?? m);
  }

  private textualPattern(): RegExp {
    if (!this.pattern) {
      this.spelled = new Map();
      for (const [secret, p] of this.textual.entries()) for (const f of spellings(secret)) if (!this.spelled.has(f)) this.spelled.set(f, p);
      this.pattern = new RegExp(
        [...this.spelled.keys()]
          .sort((a, b) => b.length - a.length)
          .map(escapeRegExp)
          .join('|'),
        'g',
      );
    }
    return this.pattern;
  }

  /** scrub() over every string of a HAR entry; base64 bodies are scrubbed as bytes. */
  scrubDeep<T>(value: T): T {
    return this.scrubValue(value) as T;
  }

  private scrubValue(v: unknown): unknown {
    if (typeof v === 'string') return this.scrub(v);
    if (Array.isArray(v)) return v.map((x) => this.scrubValue(x));
    if (!v || typeof v !== 'object') return v;
    const o = v as Record<string, unknown>;
    const base64 = o.encoding === 'base64' || o._encoding === 'base64';
    const out: Record<string, unknown> = Object.create(null); // a key `__proto__` stays a key
    for (const [k, x] of Object.entries(o)) {
      if (k === 'text' && base64 && typeof x === 'string') out[k] = this.scrubBase64(x);
      // A request URL stays a valid RFC 3986 URL: placeholders in it are percent-encoded.
      else if (k === 'url' && typeof x === 'string') out[k] = this.scrub(x).replace(/\[(redacted-\d+)\]/g, '%5B$1%5D');
      else out[k] = this.scrubValue(x);
    }
    return out;
  }

  private scrubBase64(text: string): string {
    const bytes = Buffer.from(text, 'base64').toString('latin1');
    const scrubbed = this.scrub(bytes);
    return scrubbed === bytes ? text : Buffer.from(scrubbed, 'latin1').toString('base64');
  }
}

/** A copy of a JSON value with each string under a secret key replaced by `replace`. */
function walkSecrets(v: unknown, replace: (key: string, value: string) => string): unknown {
  if (Array.isArray(v)) return v.map((x) => walkSecrets(x, replace));
  if (!v || typeof v !== 'object') return v;
  const out: Record<string, unknown> = Object.create(null); // a key `__proto__` stays a key
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
    out[k] = typeof x === 'string' && x && isSecretName(k) ? replace(k, x) : walkSecrets(x, replace);
  }
  return out;
}
