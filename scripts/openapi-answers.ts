/**
 * Writes test/fixtures/openapi-answers.json: whole answers of a Zulip server (register,
 * server_settings, messages, one message, every event), built from Zulip's OpenAPI description
 * with each field's "New in Zulip X (feature level N)" note kept beside it, so that the test
 * upstream can answer as a server of any era would (test/support/era-answers.ts drops what is
 * newer than its level). Values are the description's own examples where it has them (every
 * event), else the first enum value or a plain value of the field's type.
 *
 *   node --import tsx scripts/openapi-answers.ts [path to zulip-openapi.yaml]
 *
 * The default path is the reference copy beside the project (../shared/reference/).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parse } from 'yaml';
import { PROJECT_ROOT } from '../src/version.js';

type Schema = Record<string, unknown> & {
  $ref?: string;
  allOf?: Schema[];
  oneOf?: Schema[];
  anyOf?: Schema[];
  properties?: Record<string, Schema>;
  additionalProperties?: Schema | boolean;
  items?: Schema;
  type?: string;
  enum?: unknown[];
  example?: unknown;
  description?: string;
  nullable?: boolean;
};

/** An answer with, for each JSON pointer into it, the feature level its field is new at. */
export interface EraAnswer {
  value: unknown;
  since: Record<string, number>;
}

export interface OpenApiAnswers {
  source: string;
  answers: Record<'register' | 'server_settings' | 'messages' | 'message', EraAnswer>;
  /** Every event the description documents; `since` at '' is the event's own level. */
  events: EraAnswer[];
}

export const OPENAPI_ANSWERS_FILE = resolve(PROJECT_ROOT, 'test/fixtures/openapi-answers.json');

const NEW_IN = /New in Zulip [0-9.]+(?:-dev)? \(feature level ([0-9]+)\)/;

/** The feature level a field or event is new at, from its description. */
export function newAt(description: string | undefined): number | undefined {
  const m = description && NEW_IN.exec(description);
  return m ? Number(m[1]) : undefined;
}

class Builder {
  constructor(private readonly root: Schema) {}

  resolve(schema: Schema): Schema {
    let s = schema;
    while (s.$ref) {
      const path = s.$ref.replace(/^#\//, '').split('/');
      const { $ref: _, ...rest } = s;
      s = { ...(path.reduce<unknown>((o, k) => (o as Record<string, unknown>)[k], this.root) as Schema), ...rest };
    }
    if (s.allOf) {
      const parts = s.allOf.map((p) => this.resolve(p));
      const { allOf: _, ...rest } = s;
      const merged: Schema = { ...rest };
      for (const p of parts) {
        for (const [k, v] of Object.entries(p)) {
          if (k === 'properties') {
            const props: Record<string, Schema> = { ...(merged.properties ?? {}) };
            for (const [name, prop] of Object.entries(v as Record<string, Schema>)) props[name] = { ...(props[name] ?? {}), ...prop };
            merged.properties = props;
          } else if (k === 'description' && merged.description) continue;
          else merged[k] = v;
        }
      }
      return merged;
    }
    return s;
  }

  /** An instance of `schema`, recording the since-levels of its fields under `pointer`. */
  /** `exampleKeysOnly`: an event's own keys are those of its example (what the server sends together). */
  build(schema: Schema, pointer: string, since: Record<string, number>, example?: unknown, exampleKeysOnly = false): unknown {
    const s = this.resolve(schema);
    const given = example !== undefined ? example : s.example;
    const alternative = s.oneOf ?? s.anyOf;
    if (alternative && !s.properties) return this.build(alternative[0]!, pointer, since, given, exampleKeysOnly);
    if (s.type === 'array' && s.items && Array.isArray(given)) {
      const items = s.items;
      return given.map((element, i) => this.build(items, `${pointer}/${i}`, since, element));
    }
    if (s.properties && (given === undefined || (typeof given === 'object' && given !== null && !Array.isArray(given)))) {
      const out: Record<string, unknown> = {};
      const from = (given ?? {}) as Record<string, unknown>;
      for (const [name, prop] of Object.entries(s.properties)) {
        if (name === 'result' || name === 'msg' || name === 'ignored_parameters_unsupported') continue;
        const p = this.resolve(prop);
        if (exampleKeysOnly && given !== undefined && !(name in from)) continue; // an event's example is what is sent together
        const at = `${pointer}/${name}`;
        const level = newAt(p.description);
        if (level !== undefined) since[at] = level;
        out[name] = this.build(p, at, since, from[name]); // objects inside an event are whole
      }
      return out;
    }
    if (given !== undefined) return given;
    if (s.enum) return s.enum[0];
    if (typeof s.additionalProperties === 'object') return { 1: this.build(s.additionalProperties, `${pointer}/1`, since) };
    switch (s.type) {
      case 'array':
        return s.items ? [this.build(s.items, `${pointer}/0`, since)] : [];
      case 'integer':
      case 'number':
        return 1;
      case 'boolean':
        return false;
      case 'string':
        return 'text';
      case 'object':
        return {};
      default:
        return null;
    }
  }
}

function answer(b: Builder, schema: Schema): EraAnswer {
  const since: Record<string, number> = {};
  const value = b.build(schema, '', since);
  return { value: { result: 'success', msg: '', ...(value as object) }, since };
}

export function buildAnswers(openapi: Schema, source: string): OpenApiAnswers {
  const b = new Builder(openapi);
  const paths = openapi.paths as Record<string, Record<string, Schema>>;
  const ok = (path: string, method: string) =>
    ((paths[path]![method]!.responses as Record<string, Schema>)['200']!.content as Record<string, Schema>)['application/json']!
      .schema as Schema;
  const eventsSchema = b.resolve(ok('/events', 'get')).properties!.events!;
  const events = (b.resolve(eventsSchema).items!.oneOf ?? []).map((event) => {
    const since: Record<string, number> = {};
    const e = b.resolve(event);
    const value = b.build(e, '', since, undefined, true);
    const level = newAt(e.description);
    if (level !== undefined) since[''] = level;
    return { value, since };
  });
  return {
    source,
    answers: {
      register: answer(b, ok('/register', 'post')),
      server_settings: answer(b, ok('/server_settings', 'get')),
      messages: answer(b, ok('/messages', 'get')),
      message: answer(b, ok('/messages/{message_id}', 'get')),
    },
    events,
  };
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/^.*\//, ''))) {
  const file = resolve(process.argv[2] ?? resolve(PROJECT_ROOT, '../shared/reference/zulip-openapi.yaml'));
  const openapi = parse(readFileSync(file, 'utf8'), { maxAliasCount: -1 }) as Schema;
  const info = openapi.info as { title?: string; version?: string };
  const out = buildAnswers(openapi, `${info.title ?? 'Zulip REST API'} ${info.version ?? ''} (zulip-openapi.yaml)`.trim());
  writeFileSync(OPENAPI_ANSWERS_FILE, `${JSON.stringify(out, null, 1)}\n`);
  console.log(
    `register: ${Object.keys(out.answers.register.value as object).length} fields; ${out.events.length} events → ${OPENAPI_ANSWERS_FILE}`,
  );
}
