/**
 * P13: the credentials tests use, and a detector for every spelling of them that could end up in
 * a log line, a HAR file, a metric or an error message: as sent, URL-encoded, and base64
 * (alone or as `email:key` in a Basic Authorization header), standard or URL-safe.
 */

/** The fake's API keys (`key10secretAbC`, `botkey16secret`, …): every user of every fake. */
const FAKE_API_KEY = /(?:bot)?key\d+secret(?:AbC)?/;

const registered = new Set<string>();

/** A credential a test sends, to be looked for too (at least 8 characters, to avoid noise). */
export function registerSecret(secret: string): string {
  if (secret.length < 8) throw new Error('registerSecret: use secrets of at least 8 characters');
  registered.add(secret);
  return secret;
}

function plainHit(text: string): string | undefined {
  const m = FAKE_API_KEY.exec(text);
  if (m) return m[0];
  for (const s of registered) if (text.includes(s)) return s;
  return undefined;
}

function percentDecoded(text: string): string {
  if (!text.includes('%')) return text;
  // Byte-wise, tolerant of malformed escapes (a log line is not a URL).
  return text.replace(/(?:%[0-9a-fA-F]{2})+/g, (run) => {
    try {
      return decodeURIComponent(run);
    } catch {
      return Buffer.from(run.replace(/%/g, ''), 'hex').toString('latin1');
    }
  });
}

const BASE64_RUN = /[A-Za-z0-9+/_-]{12,}={0,2}/g;

function base64Decodings(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(BASE64_RUN)) {
    const run = m[0].replace(/=+$/, '');
    // Every alignment: a token may sit inside a longer run of letters.
    for (let shift = 0; shift < 4 && shift < run.length; shift++) {
      const part = run.slice(shift).replace(/-/g, '+').replace(/_/g, '/');
      out.push(Buffer.from(part, 'base64').toString('latin1'));
    }
  }
  return out;
}

/** Masks a found secret for a failure message (never print the secret itself). */
function masked(s: string): string {
  return `${s.slice(0, 3)}…(${s.length} chars)`;
}

/** What credential `text` contains in any spelling (masked), or undefined. */
export function findSecret(text: string): string | undefined {
  const direct = plainHit(text);
  if (direct) return `raw ${masked(direct)}`;
  const decoded = percentDecoded(text);
  const viaUrl = plainHit(decoded);
  if (viaUrl) return `URL-encoded ${masked(viaUrl)}`;
  for (const source of decoded === text ? [text] : [text, decoded]) {
    for (const d of base64Decodings(source)) {
      const hit = plainHit(d);
      if (hit) return `base64 ${masked(hit)}`;
    }
  }
  return undefined;
}
