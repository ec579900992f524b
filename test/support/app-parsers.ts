import { readFileSync } from 'node:fs';
import { APP_PARSERS_FILE, type AppParsers, type Field, type Shape } from '../../scripts/app-parsers.js';

/**
 * M4: the Zulip mobile app's own parsers as the judge. test/fixtures/app-parsers.json holds what
 * the app's generated fromJson code (zulip-flutter at a pinned commit, read by
 * scripts/app-parsers.ts) reads of each class; `parseProblems` says where a JSON value would
 * make the app's parse of it fail: a required key missing or null, a wrong JSON type (of an
 * optional key too, when it is there), an enum value the app has no fallback for, a message or
 * event the app's dispatch cannot place.
 */

export const APP_PARSERS = JSON.parse(readFileSync(APP_PARSERS_FILE, 'utf8')) as AppParsers;

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

function at(value: unknown, path: readonly string[]): unknown {
  return path.reduce<unknown>((o, k) => (isObject(o) ? o[k] : undefined), value);
}

/** The class the app's dispatch (Event.fromJson, Message.fromJson) gives `value`, or a problem. */
function dispatched(name: string, value: Json): string | { problem: string } {
  const d = APP_PARSERS.dispatch[name]!;
  const first = value[d.by[0]!];
  if (typeof first !== 'string') return { problem: `${d.by[0]} is ${JSON.stringify(first)}, not a string (${d.at})` };
  const nested = Object.keys(d.cases).some((k) => k.startsWith(`${first}/`));
  if (nested) {
    const op = value[d.by[1]!];
    if (typeof op !== 'string') return { problem: `${d.by[1]} is ${JSON.stringify(op)}, not a string (${d.at})` };
    return d.cases[`${first}/${op}`] ?? d.otherwise ?? { problem: `no class for ${first}/${op}` };
  }
  return d.cases[first] ?? d.otherwise ?? { problem: `${d.by[0]} ${JSON.stringify(first)}: the app throws (${d.at})` };
}

function checkClass(name: string, value: unknown, where: string, out: string[], filled: readonly string[] = []): void {
  if (!isObject(value)) {
    out.push(`${where}: ${name} is not a JSON object`);
    return;
  }
  let cls = name;
  if (APP_PARSERS.dispatch[name]) {
    const to = dispatched(name, value);
    if (typeof to !== 'string') {
      out.push(`${where}: ${to.problem}`);
      return;
    }
    cls = to;
  }
  const parser = APP_PARSERS.classes[cls];
  if (!parser) {
    out.push(`${where}: no parser for ${cls}`);
    return;
  }
  for (const field of parser.fields) checkField(field, value, `${where}`, cls, out, filled);
}

function checkField(field: Field, owner: Json, where: string, cls: string, out: string[], filled: readonly string[]): void {
  const path = field.path.length ? field.path.join('.') : '(itself)';
  const here = `${where}.${path} [${cls}, ${field.at}]`;
  if (field.shape.type === 'either') {
    if (!field.shape.keys.some((k) => owner[k] !== undefined && owner[k] !== null))
      out.push(`${here}: none of ${field.shape.keys.join(', ')}`);
    return;
  }
  let value = field.path.length ? at(owner, field.path) : owner;
  if (value === undefined || value === null) {
    if (!field.optional && !filled.includes(field.key)) out.push(`${here}: missing`);
    return;
  }
  if (field.merged && isObject(value)) value = { ...value, ...Object.fromEntries(field.merged.map((k) => [k, owner[k]])) };
  checkShape(field.shape, value, here, out, field.filled);
}

function checkShape(shape: Shape, value: unknown, where: string, out: string[], filled?: readonly string[]): void {
  const wrong = (what: string) => out.push(`${where}: ${JSON.stringify(value)?.slice(0, 60)} is not ${what}`);
  switch (shape.type) {
    case 'integer':
      if (!Number.isInteger(value)) wrong('an integer');
      return;
    case 'number':
      if (typeof value !== 'number') wrong('a number');
      return;
    case 'string':
    case 'boolean':
      if (typeof value !== shape.type) wrong(`a ${shape.type}`);
      return;
    case 'object':
      if (!isObject(value)) wrong('an object');
      return;
    case 'enum':
      // With a fallback (`unknownValue:`) the app's $enumDecode takes any value, of any type.
      if (!shape.fallback && !shape.values.includes(value as string | number)) wrong(`one of ${JSON.stringify(shape.values)}`);
      return;
    case 'class':
      checkClass(shape.name, value, where, out, filled);
      return;
    case 'array':
      if (!Array.isArray(value)) wrong('a list');
      else if (shape.items) for (const [i, v] of value.entries()) checkShape(shape.items, v, `${where}[${i}]`, out, filled);
      return;
    case 'map':
      if (!isObject(value)) wrong('an object');
      else if (shape.values) for (const [k, v] of Object.entries(value)) checkShape(shape.values, v, `${where}{${k}}`, out, filled);
      return;
    case 'either':
      return;
  }
}

/** Where the app's parse of `value` as class `name` (InitialSnapshot, GetEventsResult, …) would fail; [] when it would not. */
export function parseProblems(name: string, value: unknown): string[] {
  const out: string[] = [];
  checkClass(name, value, name, out);
  return out;
}
