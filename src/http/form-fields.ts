/**
 * A form-urlencoded body or query string, edited in place (M2): every parameter a change leaves
 * alone keeps its bytes, a repeated one keeps each value in its place (Django reads the last),
 * and an edit inside a value re-encodes only the characters it replaces. Decoding follows the
 * WHATWG form rules URLSearchParams uses (`+` is a space, `%XX` a byte, UTF-8); a value whose
 * bytes are not UTF-8 is left as it came, for the upstream to read as it would.
 */

interface Field {
  /** The parameter as sent, `name=value` (or `name`). */
  raw: string;
  name: string;
  /** Where the value starts in `raw` (its length when the value is empty and there is no `=`). */
  valueAt: number;
  removed?: true;
}

// A leading byte-order mark is the text's own, as the form's other decoders keep it.
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const encoder = new TextEncoder();

/** Form-decodes a name or value as URLSearchParams does (invalid UTF-8 as U+FFFD). */
function decodeLoose(raw: string): string {
  return new URLSearchParams(`a=${raw}`).get('a') ?? '';
}

/** Form-encodes a name or value as URLSearchParams does. */
export function encodeFormPart(text: string): string {
  return new URLSearchParams({ a: text }).toString().slice(2);
}

/** Gives a parameter the raw value `encoded` (adding the `=` a bare name lacks). */
function setValue(f: Field, encoded: string): void {
  const name = f.raw.slice(0, f.valueAt);
  f.raw = `${name.endsWith('=') ? name : `${name}=`}${encoded}`;
  f.valueAt = f.raw.length - encoded.length;
}

const hex = (c: number) => (c >= 48 && c <= 57) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);

/**
 * A raw value's decoded text, and for each UTF-16 unit of it (and one past its end) the offset
 * in `raw` where that unit's bytes start; undefined when its bytes are not UTF-8. Linear.
 */
export function decodeWithOffsets(raw: string): { text: string; rawAt: number[] } | undefined {
  const bytes: number[] = [];
  const byteAt: number[] = [];
  for (let i = 0; i < raw.length; ) {
    const c = raw.charCodeAt(i);
    if (c === 0x25 && i + 2 < raw.length && hex(raw.charCodeAt(i + 1)) && hex(raw.charCodeAt(i + 2))) {
      bytes.push(Number.parseInt(raw.slice(i + 1, i + 3), 16));
      byteAt.push(i);
      i += 3;
      continue;
    }
    const cp = raw.codePointAt(i)!;
    const width = cp > 0xffff ? 2 : 1;
    const encoded = c === 0x2b ? [0x20] : encoder.encode(raw.slice(i, i + width));
    for (const b of encoded) {
      bytes.push(b);
      byteAt.push(i);
    }
    i += width;
  }
  byteAt.push(raw.length);
  let text: string;
  try {
    text = decoder.decode(Uint8Array.from(bytes));
  } catch {
    return undefined;
  }
  const rawAt: number[] = [];
  let b = 0;
  for (let i = 0; i < text.length; i++) {
    rawAt.push(byteAt[b]!);
    const cp = text.codePointAt(i)!;
    if (cp > 0xffff) {
      rawAt.push(byteAt[b]!); // the low surrogate: the same bytes
      i++;
    }
    b += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  }
  rawAt.push(byteAt[b] ?? raw.length);
  return { text, rawAt };
}

export class FormFields {
  private readonly fields: Field[];
  private changed = false;

  constructor(raw: string) {
    this.fields = raw === '' ? [] : raw.split('&').map((part) => FormFields.field(part));
  }

  private static field(raw: string): Field {
    const eq = raw.indexOf('=');
    const name = decodeLoose(eq < 0 ? raw : raw.slice(0, eq));
    return { raw, name, valueAt: eq < 0 ? raw.length : eq + 1 };
  }

  private *named(name: string): Generator<Field> {
    for (const f of this.fields) if (!f.removed && f.name === name) yield f;
  }

  /** Was anything edited, removed or added? */
  get edited(): boolean {
    return this.changed;
  }

  get(name: string): string | null {
    let last: Field | undefined;
    for (const f of this.named(name)) last = f;
    return last === undefined ? null : decodeLoose(last.raw.slice(last.valueAt));
  }

  has(name: string): boolean {
    return !this.named(name).next().done;
  }

  edit(name: string, edit: (value: string) => string): boolean {
    let changed = false;
    for (const f of this.named(name)) {
      const value = decodeLoose(f.raw.slice(f.valueAt));
      const next = edit(value);
      if (next === value) continue;
      setValue(f, encodeFormPart(next));
      changed = true;
    }
    this.changed ||= changed;
    return changed;
  }

  /**
   * Applies `edits(text)` to the value of `name` the server reads (the last), when its bytes are
   * UTF-8, replacing only the bytes each edit covers; true when it changed. Edits are in order
   * and do not overlap. Other values of `name` are the server's to ignore, and are left as sent.
   */
  editText(name: string, edits: (text: string) => readonly { start: number; end: number; text: string }[]): boolean {
    let f: Field | undefined;
    for (const each of this.named(name)) f = each;
    if (!f) return false;
    const raw = f.raw.slice(f.valueAt);
    const decoded = decodeWithOffsets(raw);
    const list = decoded ? edits(decoded.text) : [];
    if (!decoded || list.length === 0) return false;
    let out = '';
    let from = 0;
    for (const e of list) {
      out += raw.slice(from, decoded.rawAt[e.start]) + encodeFormPart(e.text);
      from = decoded.rawAt[e.end]!;
    }
    setValue(f, out + raw.slice(from));
    this.changed = true;
    return true;
  }

  delete(name: string): void {
    for (const f of this.named(name)) {
      f.removed = true;
      this.changed = true;
    }
  }

  append(name: string, value: string): void {
    this.fields.push(FormFields.field(`${encodeFormPart(name)}=${encodeFormPart(value)}`));
    this.changed = true;
  }

  /** The form again: untouched parameters as they came, in their order. */
  toString(): string {
    return this.fields
      .filter((f) => !f.removed)
      .map((f) => f.raw)
      .join('&');
  }
}
