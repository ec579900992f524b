/**
 * A strict reader of the Prometheus text exposition format (0.0.4), enough to check what
 * `GET /metrics` serves: every line is `# HELP`, `# TYPE` or `name{labels} value`.
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  samples: Sample[];
  /** Metric family name → type from its `# TYPE` line. */
  types: Map<string, string>;
  /** Lines that do not follow the format, with their line numbers. */
  errors: string[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
// Go's strconv.ParseFloat, which Prometheus uses: NaN and Inf in any case (prom-client writes "Nan").
const VALUE = /^(?:[+-]?(?:nan|inf|infinity)|[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)$/i;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

/** Splits `a="x",b="y\"z"` into labels; undefined when malformed. */
function parseLabels(text: string): Record<string, string> | undefined {
  const labels: Record<string, string> = {};
  let i = 0;
  while (i < text.length) {
    const eq = text.indexOf('=', i);
    if (eq < 0) return undefined;
    const name = text.slice(i, eq);
    if (!LABEL_NAME.test(name) || text[eq + 1] !== '"') return undefined;
    let j = eq + 2;
    let value = '';
    for (; j < text.length && text[j] !== '"'; j++) {
      if (text[j] === '\\') {
        const next = text[++j];
        if (next === 'n') value += '\n';
        else if (next === '\\' || next === '"') value += next;
        else return undefined;
      } else value += text[j];
    }
    if (j >= text.length) return undefined;
    if (name in labels) return undefined;
    labels[name] = value;
    i = j + 1;
    if (i < text.length) {
      if (text[i] !== ',') return undefined;
      i++;
    }
  }
  return labels;
}

function familyOf(name: string, types: Map<string, string>): string | undefined {
  if (types.has(name)) return name;
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (name.endsWith(suffix)) {
      const base = name.slice(0, -suffix.length);
      const t = types.get(base);
      if (t === 'histogram' || t === 'summary') return base;
    }
  }
  return undefined;
}

function toNumber(value: string): number {
  const v = value.toLowerCase().replace(/^\+/, '');
  if (v === 'nan') return NaN;
  if (v === 'inf' || v === 'infinity') return Infinity;
  if (v === '-inf' || v === '-infinity') return -Infinity;
  return Number(value);
}

export function parsePrometheusText(text: string): Exposition {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  const errors: string[] = [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  // biome-ignore lint/suspicious/useIterableCallbackReturn: each check ends the line's callback with `return void bad(…)`
  lines.forEach((line, n) => {
    const bad = (why: string) => errors.push(`line ${n + 1} (${why}): ${line}`);
    // The format allows empty lines between families (prom-client writes them).
    if (line === '') return;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (!m) return void bad('comment');
      const [, kind, name, rest] = m as unknown as [string, string, string, string];
      if (!NAME.test(name)) return void bad('name');
      if (kind === 'TYPE') {
        if (!TYPES.has(rest)) return void bad('type');
        if (types.has(name)) return void bad('second TYPE');
        types.set(name, rest);
      }
      return;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$/.exec(line);
    if (!m) return void bad('sample');
    const [, name, labelText, value] = m as unknown as [string, string, string | undefined, string];
    const labels = labelText === undefined || labelText === '' ? {} : parseLabels(labelText.replace(/,$/, ''));
    if (!labels) return void bad('labels');
    if (!VALUE.test(value)) return void bad('value');
    if (!familyOf(name, types)) return void bad('no TYPE before sample');
    samples.push({ name, labels, value: toNumber(value) });
  });
  return { samples, types, errors };
}

/** The value of the one sample with this name and (at least) these labels; 0 when absent. */
export function sampleValue(e: Exposition, name: string, labels: Record<string, string> = {}): number {
  const found = e.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (found.length > 1) throw new Error(`${found.length} samples match ${name} ${JSON.stringify(labels)}`);
  return found[0]?.value ?? 0;
}
