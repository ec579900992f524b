import { createHash } from 'node:crypto';
import type { HarParam } from './har.js';
import { mimeKind, parseForm, parseMultipart, type FormPart } from './form.js';
import { isSecretName } from './redact.js';

/**
 * H2: a recorded exchange answers a request with the same method, path, sorted query and
 * normalised body. Headers (Host, Authorization, …) are not part of the key. Form and
 * multipart bodies compare as parameter sets, JSON bodies as canonical JSON (keys sorted),
 * other bodies byte for byte. Values of credential parameters compare as present, whatever
 * they hold: the recording has placeholders where the live request has secrets (H1).
 */

interface RequestLike {
  method: string;
  /** Absolute, or path and query. */
  url: string;
  contentType: string | undefined;
  body: Buffer;
  /** A recorded postData.params, used when the recording kept no body text. */
  params?: HarParam[];
}

export interface Match {
  key: string;
  /** The request in one line for a miss (credentials left out). */
  describe: string;
}

const BLANK = '[redacted]';
const SHOWN = 300;

type Pair = [string, string];

const blank = (pairs: Pair[]): Pair[] => pairs.map(([k, v]) => [k, isSecretName(k) && v ? BLANK : v]);
const sorted = (pairs: Pair[]): Pair[] =>
  [...pairs].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
const show = (pairs: Pair[]) => pairs.map(([k, v]) => (v === '' ? k : `${k}=${v}`)).join('&');
const clip = (s: string) => (s.length > SHOWN ? `${s.slice(0, SHOWN)}…` : s);
const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/** JSON with object keys sorted, credential values blanked. */
function canonical(v: unknown, key = ''): unknown {
  if (typeof v === 'string' && v && isSecretName(key)) return BLANK;
  if (Array.isArray(v)) return v.map((x) => canonical(x));
  if (!v || typeof v !== 'object') return v;
  const out: Record<string, unknown> = Object.create(null); // a key `__proto__` stays a key
  for (const k of Object.keys(v as object).sort()) out[k] = canonical((v as Record<string, unknown>)[k], k);
  return out;
}

function partPair(p: FormPart): Pair {
  if (p.fileName === undefined) return [p.name, p.value];
  return [p.name, `file ${p.fileName} sha256:${p.digest ?? sha256(p.value)}`];
}

async function bodyOf(r: RequestLike): Promise<{ kind: string; norm: string; shown: string }> {
  const kind = mimeKind(r.contentType);
  const hasParams = r.body.length === 0 && (r.params?.length ?? 0) > 0;
  if (r.body.length === 0 && !hasParams) return { kind: 'none', norm: '', shown: '' };
  if (kind === 'form') {
    const pairs = sorted(blank(hasParams ? r.params!.map((p) => [p.name, p.value ?? ''] as Pair) : parseForm(r.body.toString('utf8'))));
    return { kind, norm: JSON.stringify(pairs), shown: ` with form body ${clip(show(pairs))}` };
  }
  if (kind === 'multipart') {
    const parts = hasParams
      ? r.params!.map(
          (p): FormPart => ({ name: p.name, value: p.value ?? '', ...(p.fileName !== undefined ? { fileName: p.fileName } : {}) }),
        )
      : await parseMultipart(r.contentType!, r.body);
    if (parts) {
      const pairs = sorted(blank(parts.map(partPair)));
      return { kind, norm: JSON.stringify(pairs), shown: ` with multipart body ${clip(show(pairs))}` };
    }
  }
  if (kind === 'json' && r.body.length > 0) {
    try {
      const text = JSON.stringify(canonical(JSON.parse(r.body.toString('utf8'))));
      return { kind, norm: text, shown: ` with JSON body ${clip(text)}` };
    } catch {
      // not JSON after all: compared as bytes below
    }
  }
  return { kind: 'bytes', norm: sha256(r.body), shown: ` with a ${r.body.length}-byte body` };
}

export async function matchOf(r: RequestLike): Promise<Match> {
  const u = new URL(r.url, 'http://replay.invalid');
  const method = r.method.toUpperCase();
  const query = sorted(blank(parseForm(u.search.slice(1))));
  const body = await bodyOf(r);
  return {
    key: JSON.stringify([method, u.pathname, query, body.kind, body.norm]),
    describe: `${method} ${u.pathname}${query.length ? `?${show(query)}` : ''}${body.shown}`,
  };
}
