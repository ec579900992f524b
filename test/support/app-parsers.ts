import { readFileSync } from 'node:fs';
import {
  APP_REF_NAMES,
  APP_REFS,
  type AppParsers,
  type AppParsersFixture,
  type AppRefName,
  appParsersFile,
  type Field,
  type Shape,
} from '../../scripts/app-parsers.js';

/**
 * M4, M5: the Zulip mobile app's own parsers as the judge, at every ref of the app that
 * scripts/app-parsers.ts lists (APP_REFS: the pinned commit, the newest main, the open pull
 * requests that remove old-server code). test/fixtures/app-parsers/<name>.json holds what the
 * app's generated fromJson code reads of each class at that ref; `parseProblems` says where a
 * JSON value would make the app's parse of it fail: a required key missing or null, a wrong JSON
 * type (of an optional key too, when it is there), an enum value the app has no fallback for, a
 * message, event or legacy push notification (`LegacyFcmMessage`) the app's dispatch cannot place.
 */

export interface AppJudge {
  name: AppRefName;
  /** The ref as listed in APP_REFS, and why it is listed. */
  ref: string;
  why: string;
  /** The commit the ref resolved to when its fixture was written. */
  commit: string;
  /** The listed ref whose fixture this one shares (the same commit), if any. */
  sameAs?: AppRefName;
  parsers: AppParsers;
  /** Where the app at this ref would fail to parse `value` as class `cls`; [] when it would not. */
  parseProblems(cls: string, value: unknown): string[];
}

function load(name: AppRefName): AppJudge {
  const file = appParsersFile(name);
  let fixture: AppParsersFixture;
  try {
    fixture = JSON.parse(readFileSync(file, 'utf8')) as AppParsersFixture;
  } catch (e) {
    throw new Error(`${file}: ${(e as Error).message} (npm run fixtures:app-parsers -- <zulip-flutter git dir> writes it)`);
  }
  const { ref, why } = APP_REFS[name];
  let parsers: AppParsers;
  if ('sameAs' in fixture) {
    const shared = load(fixture.sameAs).parsers;
    if (shared.commit !== fixture.commit) throw new Error(`${file}: ${fixture.sameAs} is at ${shared.commit}, not ${fixture.commit}`);
    parsers = { ...shared, ref: fixture.ref };
  } else parsers = fixture;
  return {
    name,
    ref,
    why,
    commit: fixture.commit,
    ...('sameAs' in fixture ? { sameAs: fixture.sameAs } : {}),
    parsers,
    parseProblems: (cls, value) => parseProblems(cls, value, parsers),
  };
}

/** A judge for every ref listed in APP_REFS, in its order. */
export const APP_JUDGES: readonly AppJudge[] = APP_REF_NAMES.map(load);

export function judgeAt(name: AppRefName): AppJudge {
  return APP_JUDGES.find((j) => j.name === name)!;
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

function at(value: unknown, path: readonly string[]): unknown {
  return path.reduce<unknown>((o, k) => (isObject(o) ? o[k] : undefined), value);
}

/** One walk of a value against one ref's parsers. */
class Walk {
  readonly out: string[] = [];
  constructor(private readonly parsers: AppParsers) {}

  /** The class the app's dispatch (Event.fromJson, Message.fromJson) gives `value`, or a problem. */
  private dispatched(name: string, value: Json): string | { problem: string } {
    const d = this.parsers.dispatch[name]!;
    // `json.containsKey(k) ? A : B` (a notification's recipient).
    if (d.present !== undefined) return d.by[0]! in value ? d.present : (d.otherwise ?? { problem: `no class without ${d.by[0]}` });
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

  checkClass(name: string, value: unknown, where: string, filled: readonly string[] = []): void {
    if (!isObject(value)) {
      this.out.push(`${where}: ${name} is not a JSON object`);
      return;
    }
    let cls = name;
    if (this.parsers.dispatch[name]) {
      const to = this.dispatched(name, value);
      if (typeof to !== 'string') {
        this.out.push(`${where}: ${to.problem}`);
        return;
      }
      cls = to;
    }
    const parser = this.parsers.classes[cls];
    if (!parser) {
      this.out.push(`${where}: no parser for ${cls}`);
      return;
    }
    for (const field of parser.fields) this.checkField(field, value, where, cls, filled);
  }

  private checkField(field: Field, owner: Json, where: string, cls: string, filled: readonly string[]): void {
    const path = field.path.length ? field.path.join('.') : '(itself)';
    const here = `${where}.${path} [${cls}, ${field.at}]`;
    if (field.shape.type === 'either') {
      if (!field.shape.keys.some((k) => owner[k] !== undefined && owner[k] !== null))
        this.out.push(`${here}: none of ${field.shape.keys.join(', ')}`);
      return;
    }
    let value = field.path.length ? at(owner, field.path) : owner;
    if (value === undefined || value === null) {
      if (!field.optional && !filled.includes(field.key)) this.out.push(`${here}: missing`);
      return;
    }
    if (field.merged && isObject(value)) value = { ...value, ...Object.fromEntries(field.merged.map((k) => [k, owner[k]])) };
    this.checkShape(field.shape, value, here, field.filled);
  }

  private checkShape(shape: Shape, value: unknown, where: string, filled?: readonly string[]): void {
    const wrong = (what: string) => this.out.push(`${where}: ${JSON.stringify(value)?.slice(0, 60)} is not ${what}`);
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
        this.checkClass(shape.name, value, where, filled);
        return;
      case 'array':
        if (!Array.isArray(value)) wrong('a list');
        else if (shape.items) for (const [i, v] of value.entries()) this.checkShape(shape.items, v, `${where}[${i}]`, filled);
        return;
      case 'map':
        if (!isObject(value)) wrong('an object');
        else if (shape.values) for (const [k, v] of Object.entries(value)) this.checkShape(shape.values, v, `${where}{${k}}`, filled);
        return;
      case 'either':
        return;
    }
  }
}

/**
 * Where the app's parse of `value` as class `name` (InitialSnapshot, GetEventsResult, …) would
 * fail; [] when it would not. `parsers` is one ref's (`judgeAt(name).parsers`), by default the
 * pinned commit's; `judgeAt(name).parseProblems` asks the same of that ref.
 */
export function parseProblems(name: string, value: unknown, parsers: AppParsers = judgeAt('pinned').parsers): string[] {
  const walk = new Walk(parsers);
  walk.checkClass(name, value, name);
  return walk.out;
}
