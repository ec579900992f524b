/**
 * Writes test/fixtures/app-parsers/<name>.json, one for each ref of the Zulip mobile app listed in
 * APP_REFS: what the app's generated JSON parsers (zulip-flutter `lib/api/**\/*.g.dart`,
 * json_serializable) require of each class at that ref (contract M4: the app's own parsers are the
 * judge; M5: at every ref listed, the app as it ships and as its open pull requests will make it).
 * A field is required when its parser reads it with a non-nullable cast (`as String`, `as num`,
 * `as List<dynamic>`, …) or `$enumDecode`, with no default, no null test and no nullable
 * converter; its JSON type is the cast's. Which class an event, a message or a legacy push
 * notification is parsed as comes from the app's hand-written dispatch (`Event.fromJson` in
 * events.dart, `Message.fromJson` in model.dart, `LegacyFcmMessage.fromJson` in notifications.dart),
 * and a notification's recipient from whether a key is present (`…Recipient.fromJson`).
 *
 *   node --import tsx scripts/app-parsers.ts <zulip-flutter git dir>
 *   (npm run fixtures:app-parsers -- <zulip-flutter git dir>)
 *
 * The git dir is a clone or mirror of zulip/zulip-flutter that has every ref listed (the pull
 * requests' `refs/pull/N/head` come with a mirror, `git clone --mirror`). Each ref is resolved to
 * its commit, which the fixture records beside the ref; a ref that resolves to the commit of one
 * listed before it gets a fixture naming that one (`sameAs`) instead of a copy. Fixtures of refs
 * no longer listed are removed.
 *
 * Helpers the generated code calls (`readValue:` and `fromJson:` functions) are written by hand
 * in the app; each one the parsers use is described in READERS and HELPERS below, and the script
 * stops at one it does not know, so a new ref is read, not guessed.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { PROJECT_ROOT } from '../src/version.js';

export const APP_REPOSITORY = 'zulip/zulip-flutter';

/**
 * The refs of the app the judge reads (contract M5), in one place: the shim satisfies every one
 * at once. Adding one is a line here and `npm run fixtures:app-parsers -- <git dir>`; the
 * conformance test (test/app-conformance.test.ts) then runs against it too.
 */
export const APP_REFS = {
  pinned: {
    ref: 'e989e4f6',
    why: 'the commit docs/mobile-app.md was read against (main at the v30.0.274 release)',
  },
  main: {
    ref: 'refs/heads/main',
    why: 'the newest main in the git dir: what the next release ships',
  },
  'sweep-2398': {
    ref: 'refs/pull/2398/head',
    why: 'server sweep pull request: deletes the code for servers before 7.0 (TODO(server-7)), on an older main',
  },
  'sweep-2416': {
    ref: 'refs/pull/2416/head',
    why: 'server sweep pull request: 2398, then deletes the code for servers before 8.0 (TODO(server-8))',
  },
  'sweep-2436': {
    ref: 'refs/pull/2436/head',
    why: 'server sweep pull request, the newest: 2416 rebased on main, then deletes the code for servers before 9.0 (TODO(server-9))',
  },
} as const satisfies Record<string, { ref: string; why: string }>;

export type AppRefName = keyof typeof APP_REFS;
export const APP_REF_NAMES = Object.keys(APP_REFS) as AppRefName[];

export type Shape =
  | { type: 'integer' | 'number' | 'string' | 'boolean' | 'object' }
  | { type: 'enum'; values: (string | number)[]; fallback: boolean }
  | { type: 'array'; items?: Shape }
  | { type: 'map'; values?: Shape }
  | { type: 'class'; name: string }
  | { type: 'either'; keys: string[] };

export interface Field {
  /** The key as the parser names it. */
  key: string;
  /** Where the value is read, from the object being parsed; [] is the object itself. */
  path: string[];
  shape: Shape;
  /** Keys the app fills in itself for each element (register's user lists: `is_active`). */
  filled?: string[];
  /** Keys of the object being parsed that the app copies into the value before parsing it. */
  merged?: string[];
  /** The parser lets the key be absent or null; a value that is there must have the shape. */
  optional?: true;
  /** `file:line` of the parser line. */
  at: string;
}

export interface ParsedClass {
  at: string;
  fields: Field[];
}

export interface Dispatch {
  /** The keys whose values choose the class, outermost first. */
  by: string[];
  /** `value` or `value/value` → class. */
  cases: Record<string, string>;
  /** The class when `by[0]` is present at all, whatever its value (`json.containsKey`); else `otherwise`. */
  present?: string;
  /** The class for any other value. */
  otherwise?: string;
  at: string;
}

export interface AppParsers {
  repository: string;
  /** The ref as given (a commit, a branch, `refs/pull/N/head`). */
  ref: string;
  /** The commit it resolved to. */
  commit: string;
  classes: Record<string, ParsedClass>;
  dispatch: Record<string, Dispatch>;
  /**
   * Fields not checked: read by helpers whose type depends on another field, or optional ones
   * whose value a converter or a hand-written `fromJson(Object?)` reads.
   */
  notChecked: string[];
}

/** The fixture of a ref that resolved to the commit of one listed before it: that one's parsers. */
export interface SameAsFixture {
  repository: string;
  ref: string;
  commit: string;
  sameAs: AppRefName;
}

export type AppParsersFixture = AppParsers | SameAsFixture;

/** readValue functions: where they read, and what they mean. */
const READERS: Record<string, (key: string, owner: string) => Partial<Field> | 'optional' | 'unchecked'> = {
  _readFromPerson: (key) => ({ path: ['person', key] }),
  _readUsersIsActiveFallbackTrue: () => ({ filled: ['is_active'] }),
  _readUsersIsActiveFallbackFalse: () => ({ filled: ['is_active'] }),
  _readConversation: () => ({ path: [] }),
  _readChange: () => ({ path: [] }),
  // {...json['message'], 'flags': json['flags']}
  _readMessageValue: (key) => ({ path: [key], merged: ['flags'] }),
  _readSenderId: () => ({ path: ['sender', 'user_id'] }),
  _readColor: () => ({ shape: { type: 'string' } }),
  _readChannelIds: (_key, owner) =>
    owner === 'ChannelDeleteEvent'
      ? { path: [], shape: { type: 'either', keys: ['stream_ids', 'streams'] } }
      : { key: 'subscriptions', path: ['subscriptions'], shape: { type: 'array', items: { type: 'object' } } },
  _readValue: () => 'unchecked',
  _readFromMessage: () => 'optional',
  _readPoll: () => 'optional',
  // `(User._readProfileData(json, 'profile_data') as Map<String, dynamic>?)?.map(…)`: the key itself, cast below
  _readProfileData: () => ({}),
  _readMoveData: () => 'optional',
  // a notification's recipient, read from the whole payload (the cast names its class)
  _readWhole: () => ({ path: [] }),
  // `(json['realm_url'] ?? json['realm_uri']) as String` (TODO(server-9))
  _readRealmUrl: () => ({ path: [], shape: { type: 'either', keys: ['realm_url', 'realm_uri'] } }),
  _readNullableStringFromPerson: () => 'unchecked',
  // JsonNullable's readers, whose value a converter reads (absent, null and a value differ)
  readStringFromJson: () => 'unchecked',
  readIntFromJson: () => 'unchecked',
};

/** The app's own (underscore) fromJson functions given `json['key']`. */
const HELPERS: Record<string, Shape | 'optional'> = {
  'Message._reactionsFromJson': { type: 'array', items: { type: 'class', name: 'Reaction' } },
  'Message._flagsFromJson': { type: 'array', items: { type: 'string' } },
  'TypingEvent._recipientIdsFromJson': 'optional',
  'GetMessagesResult._messagesFromJson': { type: 'array', items: { type: 'class', name: 'Message' } },
  'DmMessage._conversationFromJson': { type: 'array', items: { type: 'object' } },
};

/**
 * Parsers the app writes by hand for classes its dispatch names: each field with the line of the
 * app's source that reads it (the script stops if that line is gone).
 */
const HAND_WRITTEN: Record<string, { file: string; fields: [line: string, field: Omit<Field, 'at'>][] }> = {
  // every key optional: `json['status_text'] as String?`, emoji keys likewise
  UserStatusChange: { file: 'lib/api/model/model.dart', fields: [] },
  UnexpectedEvent: {
    file: 'lib/api/model/events.dart',
    fields: [
      ["UnexpectedEvent.fromJson(this.json) : super(id: json['id'] as int);", { key: 'id', path: ['id'], shape: { type: 'integer' } }],
    ],
  },
  // every key optional: the payload kept whole as it came
  UnexpectedFcmMessage: { file: 'lib/api/notifications.dart', fields: [] },
  // `switch (json) { {'pm_users': String pmUsers} => …, {'sender_id': String senderId, 'user_id': String userId} => …, _ => throw }`
  LegacyFcmMessageDmRecipient: {
    file: 'lib/api/notifications.dart',
    fields: [
      ["{'pm_users': String pmUsers} =>", { key: 'pm_users', path: [], shape: { type: 'either', keys: ['pm_users', 'sender_id'] } }],
    ],
  },
  RealmUserRemoveEvent: {
    file: 'lib/api/model/events.dart',
    fields: [
      ["id: json['id'] as int,", { key: 'id', path: ['id'], shape: { type: 'integer' } }],
      [
        "userId: (json['person'] as Map<String, dynamic>)['user_id'] as int);",
        { key: 'user_id', path: ['person', 'user_id'], shape: { type: 'integer' } },
      ],
    ],
  },
};

/** JSON types by cast. `as num` takes any JSON number (`.toInt()` truncates); only `as int` wants an integer. */
const CASTS: Record<string, Shape['type']> = {
  num: 'number',
  int: 'integer',
  String: 'string',
  bool: 'boolean',
  List: 'array',
  Map: 'map',
};

function git(dir: string, ...args: string[]): string {
  return execFileSync('git', ['--git-dir', dir, ...args], { encoding: 'utf8', maxBuffer: 64 << 20 });
}

/** The commit `ref` names in `gitDir` (a commit, a tag, a branch, `refs/pull/N/head`); throws when it names none. */
export function resolveRef(gitDir: string, ref: string): string {
  try {
    return git(gitDir, 'rev-parse', '--verify', '--quiet', '--end-of-options', `${ref}^{commit}`).trim();
  } catch {
    throw new Error(`${gitDir}: ${ref} names no commit (a mirror of ${APP_REPOSITORY} has refs/pull/N/head: git clone --mirror)`);
  }
}

/** Splits a call's argument text at top-level commas. */
function topLevelArgs(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let quote: string | undefined;
  let from = 0;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (quote) {
      if (ch === quote && text[i - 1] !== '\\') quote = undefined;
    } else if (ch === "'" || ch === '"') quote = ch;
    else if ('([{<'.includes(ch)) depth++;
    else if (')]}>'.includes(ch) && !(ch === '>' && text[i - 1] === '=')) depth--;
    else if (ch === ',' && depth === 0) {
      out.push(text.slice(from, i));
      from = i + 1;
    }
  }
  out.push(text.slice(from));
  return out.map((a) => a.trim()).filter(Boolean);
}

/** The text inside the parentheses that open at `open`. */
function inside(text: string, open: number): string {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === '(') depth++;
    else if (text[i] === ')' && --depth === 0) return text.slice(open + 1, i);
  }
  throw new Error(`unbalanced parentheses at ${text.slice(open, open + 60)}`);
}

function enumValues(source: string, map: string): (string | number)[] {
  const body = new RegExp(`const _\\$${map} = \\{([^}]*)\\}`).exec(source)?.[1];
  if (body === undefined) throw new Error(`enum map ${map} not found`);
  return [...body.matchAll(/:\s*('([^']*)'|-?[0-9]+)/g)].map((m) => (m[2] !== undefined ? m[2] : Number(m[1])));
}

function elementShape(expr: string, source: string): Shape | undefined {
  const cls = /\(e\)\s*=>\s*(\w+)\.fromJson\(\s*e as Map/.exec(expr) ?? /MapEntry\(\s*[^,]+,\s*(\w+)\.fromJson\(\s*e as Map/.exec(expr);
  if (cls) return { type: 'class', name: cls[1]! };
  if (/\(e as num\)\.toInt\(\)/.test(expr)) return { type: 'number' };
  // A map's lists of strings first: their elements' `(e) => e as String` is not the map's values.
  const listOfStrings = /MapEntry\(\s*k,\s*\(e as List<dynamic>\)\s*\.map\(\(e\) => e as String\)/.exec(expr);
  if (listOfStrings) return { type: 'array', items: { type: 'string' } };
  if (/\(e\) => e as String\)/.test(expr)) return { type: 'string' };
  const en = /\$enumDecode\(_\$(\w+), e\)/.exec(expr);
  if (en) return { type: 'enum', values: enumValues(source, en[1]!), fallback: false };
  return undefined;
}

/**
 * One constructor argument: the field it reads, `optional` when the parser lets it be absent or
 * null (a nullable cast, a null test, a default, `$enumDecodeNullable`); undefined when it reads
 * no key, or an optional key through a helper whose shape is not described here; 'unchecked'
 * when a present value's shape cannot be read from the parser (a converter, a hand-written
 * `fromJson(Object?)`).
 */
function fieldOf(arg: string, owner: string, source: string, at: string): Field | undefined | 'unchecked' {
  let expr = arg.replace(/^\w+:\s*/, '').replace(/\s+/g, ' ');
  // `json['k'] == null ? null : C.fromJson(json['k'] as …)`: the value, when there is one, is the second branch's.
  const nullTest = /^\(?(?:json\['[^']+'\]|\w+\.\w+\(json, '[^']+'\)) == null \? [^:]+ : (.*)$/.exec(expr);
  if (nullTest) expr = nullTest[1]!;
  const direct = /json\['([^']+)'\]/.exec(expr);
  const reader = /(?:\w+\.)?(_?read\w+)\(\s*json,\s*'([^']+)',?\s*\)/.exec(expr);
  const readerFirst = reader && (!direct || reader.index < direct.index);
  const key = readerFirst ? reader[2]! : direct?.[1];
  if (key === undefined) return undefined;
  const optional = (f: Field): Field => ({ ...f, optional: true });
  const nullable = nullTest !== null || /== null|\?\?/.test(topLevel(expr));
  let field: Field = { key, path: [key], shape: { type: 'object' }, at };
  if (readerFirst) {
    const meaning = READERS[reader[1]!];
    if (!meaning) throw new Error(`${at}: unknown readValue ${reader[1]} (describe it in READERS)`);
    const m = meaning(key, owner);
    if (m === 'optional') return undefined;
    if (m === 'unchecked') return 'unchecked';
    field = { ...field, ...m };
    if (m.shape) return nullable || /\?\)|\bas \w+(<[^>]*>)?\?/.test(expr) ? optional(field) : field;
  }
  const helper = /^(\w+\._\w+)\(\s*json\['[^']+'\](?: as \w+)?,?\s*\)$/.exec(expr);
  if (helper) {
    const shape = HELPERS[helper[1]!];
    if (shape === undefined) throw new Error(`${at}: unknown fromJson helper ${helper[1]} (describe it in HELPERS)`);
    if (shape === 'optional') return undefined;
    return nullable ? optional({ ...field, shape }) : { ...field, shape };
  }
  // `_$JsonConverterFromJson` passes null on as null: optional, its value the converter's to read.
  if (/_\$JsonConverterFromJson/.test(expr)) return 'unchecked';
  const en = /^\$enumDecode(Nullable)?\(\s*_\$(\w+),/.exec(expr);
  if (en) {
    const f: Field = { ...field, shape: { type: 'enum', values: enumValues(source, en[2]!), fallback: /unknownValue:/.test(expr) } };
    return en[1] || nullable ? optional(f) : f;
  }
  const cast = castAfter(expr, (readerFirst ? reader.index : direct!.index) + 1);
  if (!cast) {
    // An optional value handed whole to a hand-written parser (`GroupSettingValue.fromJson(json['k'])`).
    if (nullable) return 'unchecked';
    throw new Error(`${at}: no cast for ${key}: ${expr}`);
  }
  const made = fieldOfCast(field, cast.type, expr, source, at);
  return cast.nullable || nullable ? optional(made) : made;
}

/** `expr` without what stands inside parentheses (an element's lambda, a call's arguments). */
function topLevel(expr: string): string {
  let depth = 0;
  let out = '';
  for (const ch of expr) {
    if (ch === '(') depth++;
    if (depth === 0) out += ch;
    if (ch === ')') depth = Math.max(0, depth - 1);
  }
  return out;
}

/** The first `as T` (`as Map<String, List<dynamic>>?` whole) from `from` on: T, and whether it is nullable. */
function castAfter(expr: string, from: number): { type: string; nullable: boolean } | undefined {
  const m = /\bas (\w+)/.exec(expr.slice(from));
  if (!m) return undefined;
  let i = from + m.index + m[0].length;
  if (expr[i] === '<') {
    for (let depth = 0; i < expr.length; i++) {
      if (expr[i] === '<') depth++;
      else if (expr[i] === '>' && --depth === 0) break;
    }
    i++;
  }
  return { type: m[1]!, nullable: expr[i] === '?' };
}

/** A field read with `as T` (`T` a JSON type): its shape, with the class or elements the expression makes of it. */
function fieldOfCast(field: Field, castType: string, expr: string, source: string, at: string): Field {
  const { key } = field;
  const type = CASTS[castType];
  if (!type) throw new Error(`${at}: unknown cast ${castType} for ${key}`);
  const cls = new RegExp(`^(\\w+)\\.fromJson\\(\\s*(?:\\w+\\.)?(?:json\\['${key}'\\]|_?read\\w+\\(json, '${key}'\\)) as Map`).exec(expr);
  if (cls) return { ...field, shape: { type: 'class', name: cls[1]! } };
  if (type === 'array') {
    const items = elementShape(expr, source);
    return { ...field, shape: items ? { type: 'array', items } : { type: 'array' } };
  }
  if (type === 'map') {
    const values = elementShape(expr, source);
    return { ...field, shape: values ? { type: 'map', values } : { type: 'object' } };
  }
  return { ...field, shape: { type } as Shape };
}

function parseClasses(file: string, source: string, into: AppParsers): void {
  const starts = [...source.matchAll(/^(\w+) _\$(\w+)FromJson\(/gm)];
  for (const [n, start] of starts.entries()) {
    const owner = start[2]!;
    const end = starts[n + 1]?.index ?? source.length;
    const text = source.slice(start.index, end);
    const lineOf = (offset: number) => `${file}:${source.slice(0, start.index + offset).split('\n').length}`;
    const fields: Field[] = [];
    const checked = /\$checkKeys\([\s\S]*?requiredKeys: const \[([^\]]*)\]/.exec(text);
    for (const k of checked ? [...checked[1]!.matchAll(/'([^']+)'/g)].map((m) => m[1]!) : []) {
      fields.push({ key: k, path: [k], shape: { type: 'string' }, at: lineOf(checked!.index) });
    }
    const call = new RegExp(`(?:=>|return)\\s*${owner}\\(`).exec(text);
    if (!call) throw new Error(`${file}: no constructor call in ${owner}'s parser`);
    const argsText = inside(text, call.index + call[0].length - 1);
    let offset = call.index + call[0].length;
    for (const arg of topLevelArgs(argsText)) {
      const at = lineOf(text.indexOf(arg, offset));
      offset = text.indexOf(arg, offset) + arg.length;
      const f = fieldOf(arg, owner, source, at);
      if (f === 'unchecked') into.notChecked.push(`${owner}.${/^(\w+):/.exec(arg)?.[1] ?? arg}`);
      else if (f && !fields.some((g) => g.key === f.key)) fields.push(f);
    }
    into.classes[owner] = { at: lineOf(0), fields };
  }
}

/**
 * `case 'x': return C.fromJson(json);` (with `switch (json['op'] …)` one level down), or
 * `if (type == 'x') return C.fromJson(json);`.
 */
function parseDispatch(file: string, source: string, factory: string, into: AppParsers): void {
  const direct = Math.max(source.indexOf(`factory ${factory}.fromJson(`), source.indexOf(`static ${factory} fromJson(`));
  const at = direct >= 0 ? direct : staticFromJson(source, factory);
  if (at < 0) throw new Error(`${file}: no ${factory}.fromJson`);
  const body = source.slice(at, source.indexOf('\n  }\n', at));
  const by = [...body.matchAll(/(?:switch \(|= )json\['(\w+)'\]/g)].map((m) => m[1]!);
  const cases: Record<string, string> = {};
  let outer: string | undefined;
  let otherwise: string | undefined;
  for (const line of body.split('\n')) {
    const single = /(?:case '([^']+)':|== '([^']+)'\))\s*return (\w+)\.fromJson/.exec(line)?.filter((m) => m !== undefined);
    const opens = /case '([^']+)':\s*$/.exec(line);
    const fallback = /default:\s*return (\w+)\.fromJson/.exec(line);
    if (single) cases[outer ? `${outer}/${single[1]}` : single[1]!] = single[2]!;
    else if (opens) outer = opens[1];
    else if (fallback) {
      if (outer === undefined) otherwise = fallback[1];
    } else if (/^\s{6}[a-z]/.test(line) || /^\s{6}\/\//.test(line)) outer = undefined;
    if (/^\s{8}}/.test(line)) outer = undefined;
  }
  const line = `${file}:${source.slice(0, at).split('\n').length}`;
  into.dispatch[factory] = { by: [...new Set(by)], cases, ...(otherwise ? { otherwise } : {}), at: line };
}

/** Where `class Factory …` declares `static T fromJson(` (a supertype's `T`: LegacyFcmMessage's NotifPayload); -1 if it does not. */
function staticFromJson(source: string, factory: string): number {
  const cls = source.search(new RegExp(`class ${factory}\\b`));
  if (cls < 0) return -1;
  const end = source.indexOf('\n}\n', cls);
  const m = /\n\s+static \w+ fromJson\(/.exec(source.slice(cls, end < 0 ? undefined : end));
  return m ? cls + m.index + 1 : -1;
}

/** `return json.containsKey('k') ? A.fromJson(json) : B.fromJson(json);`: A when the key is present, else B. */
function parsePresenceDispatch(file: string, source: string, factory: string, into: AppParsers): void {
  const at = source.indexOf(`factory ${factory}.fromJson(`);
  if (at < 0) throw new Error(`${file}: no ${factory}.fromJson`);
  const body = source.slice(at, source.indexOf('\n  }\n', at));
  const m = /containsKey\('(\w+)'\)\)?\s*\?\s*(\w+)\.fromJson\(json\)\s*:\s*(\w+)\.fromJson\(json\)/.exec(body);
  if (!m) throw new Error(`${file}: ${factory}.fromJson no longer chooses by a key's presence (update parsePresenceDispatch)`);
  const line = `${file}:${source.slice(0, at).split('\n').length}`;
  into.dispatch[factory] = { by: [m[1]!], cases: {}, present: m[2]!, otherwise: m[3]!, at: line };
}

/** What the app's parsers at `ref` (anything `git rev-parse` resolves to a commit) require. */
export function readAppParsers(gitDir: string, ref: string): AppParsers {
  const commit = resolveRef(gitDir, ref);
  const show = (file: string) => git(gitDir, 'show', `${commit}:${file}`);
  const out: AppParsers = { repository: APP_REPOSITORY, ref, commit, classes: {}, dispatch: {}, notChecked: [] };
  const files = git(gitDir, 'ls-tree', '-r', '--name-only', commit, 'lib/api')
    .split('\n')
    .filter((f) => f.endsWith('.g.dart'));
  for (const file of files) parseClasses(file, show(file), out);
  parseDispatch('lib/api/model/events.dart', show('lib/api/model/events.dart'), 'Event', out);
  parseDispatch('lib/api/model/model.dart', show('lib/api/model/model.dart'), 'Message', out);
  const notifications = show('lib/api/notifications.dart');
  parseDispatch('lib/api/notifications.dart', notifications, 'LegacyFcmMessage', out);
  parsePresenceDispatch('lib/api/notifications.dart', notifications, 'LegacyFcmMessageRecipient', out);
  parsePresenceDispatch('lib/api/notifications.dart', notifications, 'NotifPayloadRecipient', out);
  for (const [name, { file, fields }] of Object.entries(HAND_WRITTEN)) {
    const source = show(file);
    const lines = source.split('\n');
    const start = lines.findIndex((l) => l.includes(`${name}.fromJson(`));
    const found = fields.map(([text, field]) => {
      const n = lines.findIndex((l, i) => i >= start && l.includes(text));
      if (start < 0 || n < 0) throw new Error(`${file}: ${name}'s parser no longer reads \`${text}\` (update HAND_WRITTEN)`);
      return { ...field, at: `${file}:${n + 1}` };
    });
    out.classes[name] = { at: `${file}:${start + 1}`, fields: found };
  }
  for (const [name, d] of Object.entries(out.dispatch)) {
    for (const c of [...Object.values(d.cases), d.present, d.otherwise])
      if (c && !out.classes[c]) throw new Error(`${name} dispatches to ${c}, which has no parser here`);
  }
  const named = (shape: Shape | undefined): string[] =>
    !shape
      ? []
      : shape.type === 'class'
        ? [shape.name]
        : shape.type === 'array'
          ? named(shape.items)
          : shape.type === 'map'
            ? named(shape.values)
            : [];
  for (const [owner, c] of Object.entries(out.classes)) {
    for (const f of c.fields) {
      for (const name of named(f.shape))
        if (!out.classes[name] && !out.dispatch[name])
          throw new Error(`${owner}.${f.key} is parsed as ${name}, which has no parser here (add it to HAND_WRITTEN)`);
    }
  }
  return out;
}

export const APP_PARSERS_DIR = resolve(PROJECT_ROOT, 'test/fixtures/app-parsers');

export const appParsersFile = (name: AppRefName): string => resolve(APP_PARSERS_DIR, `${name}.json`);

/** Writes the fixture of every ref in APP_REFS (and removes any other), saying what each holds. */
export function writeAppParsers(gitDir: string, log: (line: string) => void = console.log): void {
  mkdirSync(APP_PARSERS_DIR, { recursive: true });
  const written = new Map<string, AppRefName>();
  for (const name of APP_REF_NAMES) {
    const { ref } = APP_REFS[name];
    const commit = resolveRef(gitDir, ref);
    const same = written.get(commit);
    let fixture: AppParsersFixture;
    let said: string;
    if (same) {
      fixture = { repository: APP_REPOSITORY, ref, commit, sameAs: same };
      said = `the same commit as ${same}`;
    } else {
      const parsers = readAppParsers(gitDir, ref);
      written.set(commit, name);
      fixture = parsers;
      const fields = Object.values(parsers.classes).flatMap((c) => c.fields);
      const optional = fields.filter((f) => f.optional).length;
      said = `${Object.keys(parsers.classes).length} classes, ${fields.length - optional} required and ${optional} optional fields, ${Object.keys(parsers.dispatch.Event?.cases ?? {}).length} event cases`;
    }
    writeFileSync(appParsersFile(name), `${JSON.stringify(fixture, null, 1)}\n`);
    log(`${name} (${ref} = ${commit.slice(0, 10)}): ${said} → ${appParsersFile(name)}`);
  }
  for (const file of readdirSync(APP_PARSERS_DIR)) {
    if (file.endsWith('.json') && !(file.slice(0, -'.json'.length) in APP_REFS)) {
      rmSync(resolve(APP_PARSERS_DIR, file));
      log(`removed ${file}: not in APP_REFS`);
    }
  }
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/^.*\//, ''))) {
  const [gitDir, ...rest] = process.argv.slice(2);
  if (!gitDir || rest.length) {
    console.error('usage: node --import tsx scripts/app-parsers.ts <zulip-flutter git dir>   (the refs are APP_REFS in this file)');
    process.exit(2);
  }
  writeAppParsers(gitDir);
}
