import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import busboy from 'busboy';
import { type Capabilities, eraAnswer, eraEvents } from './era-answers.js';

/**
 * A fake Zulip server that behaves, era by era, like the real one as documented in
 * ../shared/reference/zulip-server.md: server_settings, presence (legacy per-client rows
 * before 7.0, one row per user after; slim format from 3.0; last_update_id from 9.0),
 * GET /users, GET /users/me, POST /register, DELETE /events, plus /test/* helpers for the
 * pass-through tests.
 */

export type Era = '2.1' | '3.0' | '4.0' | '5.0' | '6.0' | '7.0' | '8.0' | '9.0';

export const ERA_FEATURE_LEVEL: Record<Era, number> = {
  '2.1': 0,
  '3.0': 25,
  '4.0': 65,
  '5.0': 122,
  '6.0': 156,
  '7.0': 185,
  '8.0': 237,
  '9.0': 277,
};

export const ERAS = Object.keys(ERA_FEATURE_LEVEL) as Era[];
/** The eras the shim emulates for (before 9.0, where it passes presence and register through). */
export const OLD_ERAS = ERAS.filter((e) => e !== '9.0');

export interface FakeUser {
  user_id: number;
  email: string;
  delivery_email: string;
  full_name: string;
  /** 100 owner, 200 admin, 300 moderator, 400 member, 600 guest. */
  role: 100 | 200 | 300 | 400 | 600;
  is_bot: boolean;
  bot_type?: number;
  bot_owner_id?: number;
  is_billing_admin: boolean;
  is_active: boolean;
  timezone: string;
  date_joined: string;
  avatar_version: number;
  api_key: string;
  presence_enabled: boolean;
  profile_data: Record<string, { value: string; rendered_value?: string }>;
}

interface ClientRow {
  status: 'active' | 'idle';
  timestamp: number;
}

/** 7.0+ storage: one row per user. */
interface UserRow {
  last_active: number | null;
  last_connected: number;
  last_update_id: number;
}

export interface FakeStats {
  /** Every request, by "METHOD path". */
  requests: Map<string, number>;
  /** Presence calls that returned presence data (not ping_only). */
  presenceFull: number;
  presencePing: number;
  usersList: number;
  register: number;
  queuesCreated: number;
  queuesDeleted: number;
}

export interface FakeOptions {
  era: Era;
  /** The feature level the server reports, if not its era's (P9's boundary at 228 lies between eras). */
  featureLevel?: number;
  /** Number of human users created (plus one bot). Default 6. */
  users?: number;
  /** The upstream clock, float seconds; tests move it with advance(). */
  now?: number;
  realmHost?: string;
  /**
   * X12: one realm answering any Host (a server whose realm is on its root domain), as
   * `server_settings`' `realm_uri` says; by default each Host is a realm of its own (a server
   * with a realm per subdomain).
   */
  oneRealm?: boolean;
  /**
   * The realm's email_address_visibility. Users' `email` is a dummy address different from
   * `delivery_email`, as in a realm that hides addresses: "nobody" (default) shows nobody the
   * real one before 6.0; "admins" shows it to administrators (own user from 3.0, user lists).
   */
  emailAddressVisibility?: 'nobody' | 'admins';
  /**
   * Whole answers (M4): register and server_settings carry every field the era's server sends
   * (as Zulip's API description documents them, support/era-answers.ts) beside what this fake
   * models itself; GET /messages, GET /messages/{id} and GET /events answer with the documented
   * messages and every documented event of the era. Default: only the fields the fake models.
   */
  whole?: boolean;
  /**
   * A web-public realm (`enable_spectator_access`, 5.0+): a `/json/register` with no session is a
   * logged-out visitor's, answered as Zulip answers one: `queue_id: null` and, when presence is
   * asked for, `presences: {}` (with `server_timestamp`). Only those parts of a spectator's
   * answer are modelled.
   */
  spectators?: boolean;
}

const DAY = 86_400;

/**
 * A server's static emoji codes file (static/generated/emoji/emoji_codes.json, as build_emoji
 * writes it), a few emoji of it: canonical names, aliases in the file's order, one code with none.
 */
export const EMOJI_CODES = {
  names: ['+1', 'thumbs_up', 'like', 'grinning', 'happy', 'octopus'],
  name_to_codepoint: { '+1': '1f44d', thumbs_up: '1f44d', like: '1f44d', grinning: '1f600', happy: '1f600', octopus: '1f419' },
  codepoint_to_name: { '1f44d': '+1', '1f600': 'grinning', '1f419': 'octopus' },
  emoji_catalog: { 'Smileys & Emotion': ['1f600'], 'People & Body': ['1f44d'], 'Animals & Nature': ['1f419'] },
  emoticon_conversions: { ':)': ':smile:' },
};

export class FakeZulip {
  readonly era: Era;
  readonly featureLevel: number;
  readonly oneRealm: boolean;
  readonly emailAddressVisibility: 'nobody' | 'admins';
  readonly whole: boolean;
  readonly spectators: boolean;
  now: number;
  users: FakeUser[] = [];
  /** < 7.0: rows per user per client name. */
  clientRows = new Map<number, Map<string, ClientRow>>();
  /** >= 7.0. */
  userRows = new Map<number, UserRow>();
  presenceSequence = 0;
  stats: FakeStats = this.freshStats();
  openQueues = new Set<string>();
  /** `whole`: the client capabilities each queue was registered with. */
  private queueCapabilities = new Map<string, Capabilities>();
  /** Headers of every request received, newest last (for pass-through assertions). */
  seen: Array<{ method: string; url: string; headers: http.IncomingHttpHeaders; body: Buffer }> = [];
  /** While set, full presence answers (made when asked) are sent only once it settles: a slow upstream. */
  fullPresenceHeld?: Promise<void> | undefined;
  /**
   * While set, full presence answers (made when asked) send their head at once and their body in
   * parts over `ms`: a slow link. The last part also waits for `until`; with `cut` the
   * connection is cut instead of sending it.
   */
  fullPresenceDrip?: { ms: number; until?: Promise<void>; cut?: boolean } | undefined;
  /** A hook to answer a request differently (faults); return true when handled. */
  override?: (req: IncomingMessage, res: ServerResponse, body: Buffer) => boolean | Promise<boolean>;
  private server?: http.Server;
  url = '';

  constructor(o: FakeOptions) {
    this.era = o.era;
    this.oneRealm = o.oneRealm ?? false;
    this.featureLevel = o.featureLevel ?? ERA_FEATURE_LEVEL[o.era];
    this.emailAddressVisibility = o.emailAddressVisibility ?? 'nobody';
    this.whole = o.whole ?? false;
    this.spectators = o.spectators ?? false;
    this.now = o.now ?? 1_700_000_000.25;
    const n = o.users ?? 6;
    const roles: FakeUser['role'][] = [100, 200, 300, 400, 600];
    for (let i = 0; i < n; i++) {
      const id = 10 + i;
      this.users.push({
        user_id: id,
        email: `user${id}@zulip.example.com`,
        delivery_email: `person${id}@example.org`,
        full_name: `User ${id}`,
        role: roles[i % roles.length]!,
        is_bot: false,
        is_billing_admin: i === 1,
        is_active: true,
        timezone: i % 2 === 0 ? 'Europe/Berlin' : '',
        date_joined: new Date((1_600_000_000 + i * DAY) * 1000)
          .toISOString()
          .replace('Z', '+00:00')
          .replace(/\.(\d{3})/, '.$1000'),
        avatar_version: 1 + (i % 3),
        api_key: `key${id}secretAbC`,
        presence_enabled: true,
        profile_data: { '1': { value: `Value ${id}`, rendered_value: `<p>Value ${id}</p>` } },
      });
    }
    this.users.push({
      user_id: 10 + n,
      email: `bot${10 + n}-bot@zulip.example.com`,
      delivery_email: `bot${10 + n}-bot@zulip.example.com`,
      full_name: 'Helper Bot',
      role: 400,
      is_bot: true,
      bot_type: 1,
      bot_owner_id: 10,
      is_billing_admin: false,
      is_active: true,
      timezone: '',
      date_joined: '2020-09-13T12:26:40.000000+00:00',
      avatar_version: 1,
      api_key: `botkey${10 + n}secret`,
      presence_enabled: true,
      profile_data: {},
    });
  }

  private freshStats(): FakeStats {
    return { requests: new Map(), presenceFull: 0, presencePing: 0, usersList: 0, register: 0, queuesCreated: 0, queuesDeleted: 0 };
  }

  resetStats(): void {
    this.stats = this.freshStats();
    this.seen = [];
  }

  /** Basic auth header for a user. */
  auth(u: FakeUser | number): string {
    const user = typeof u === 'number' ? this.user(u) : u;
    return `Basic ${Buffer.from(`${user.email}:${user.api_key}`).toString('base64')}`;
  }

  user(id: number): FakeUser {
    const u = this.users.find((x) => x.user_id === id);
    if (!u) throw new Error(`no user ${id}`);
    return u;
  }

  humans(): FakeUser[] {
    return this.users.filter((u) => !u.is_bot);
  }

  advance(seconds: number): void {
    this.now += seconds;
  }

  // ---------------------------------------------------------------- presence model

  /** Records a presence report as the era's server would (2.1 do_update_user_presence, …). */
  report(userId: number, status: 'active' | 'idle', client = 'website'): void {
    const u = this.user(userId);
    if (this.featureLevel >= 3 && !u.presence_enabled) return;
    const t = Math.floor(this.now);
    if (this.featureLevel < ERA_FEATURE_LEVEL['7.0']) {
      const rows = this.clientRows.get(userId) ?? new Map<string, ClientRow>();
      const prev = rows.get(client);
      // Pre-7.0 anti-flap: idle does not overwrite a fresh active row of the same client.
      if (prev && prev.status === 'active' && status === 'idle' && t - prev.timestamp < 70) {
        this.clientRows.set(userId, rows);
        return;
      }
      rows.set(client, { status, timestamp: t });
      this.clientRows.set(userId, rows);
      return;
    }
    const row = this.userRows.get(userId);
    if (!row) {
      this.userRows.set(userId, {
        last_connected: t,
        last_active: status === 'active' ? t : null,
        last_update_id: ++this.presenceSequence,
      });
      return;
    }
    let changed = false;
    if (t - row.last_connected > 55) {
      row.last_connected = t;
      changed = true;
    }
    if (status === 'active' && (row.last_active === null || t - row.last_active > 55)) {
      row.last_active = t;
      if (row.last_connected < t) row.last_connected = t;
      changed = true;
    }
    if (changed) row.last_update_id = ++this.presenceSequence;
  }

  /**
   * Invisible mode (the 6.0–9.x rule, and the same backdating on older eras for tests): the
   * user's rows are replaced by one idle row OFFLINE_THRESHOLD_SECS + 120 back (300 + 120 before
   * 7.0, 200 + 120 from it), which from 7.0 has no active time (shown as date_joined); turning
   * it off again writes an active row now.
   */
  setPresenceEnabled(userId: number, enabled: boolean): void {
    const u = this.user(userId);
    u.presence_enabled = enabled;
    const t = Math.floor(this.now);
    if (this.featureLevel < ERA_FEATURE_LEVEL['7.0']) {
      this.clientRows.set(
        userId,
        new Map([['website', enabled ? { status: 'active', timestamp: t } : { status: 'idle', timestamp: t - 420 }]]),
      );
      return;
    }
    this.userRows.set(userId, {
      last_active: enabled ? t : null,
      last_connected: enabled ? t : t - 320,
      last_update_id: ++this.presenceSequence,
    });
  }

  private dateJoinedTs(u: FakeUser): number {
    return Math.floor(Date.parse(u.date_joined) / 1000);
  }

  /** Users shown in a realm presence answer: active humans with a row in the last 14 days. */
  private presenceUsers(): FakeUser[] {
    const cutoff = this.now - 14 * DAY;
    return this.users.filter((u) => {
      if (u.is_bot || !u.is_active) return false;
      if (this.featureLevel < ERA_FEATURE_LEVEL['7.0']) {
        const rows = this.clientRows.get(u.user_id);
        return !!rows && [...rows.values()].some((r) => r.timestamp >= cutoff);
      }
      const row = this.userRows.get(u.user_id);
      return !!row && row.last_connected >= cutoff;
    });
  }

  legacyPresence(): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    const cutoff = this.now - 14 * DAY;
    for (const u of this.presenceUsers()) {
      if (this.featureLevel < ERA_FEATURE_LEVEL['7.0']) {
        const rows = [...this.clientRows.get(u.user_id)!.entries()].filter(([, r]) => r.timestamp >= cutoff);
        const entry: Record<string, unknown> = {};
        let newest: [string, ClientRow] | undefined;
        for (const [client, r] of rows) {
          entry[client] = { client, status: r.status, timestamp: r.timestamp, pushable: false };
          if (!newest || r.timestamp > newest[1].timestamp) newest = [client, r];
        }
        entry.aggregated = { client: newest![0], status: newest![1].status, timestamp: newest![1].timestamp };
        out[u.email] = entry;
      } else {
        const row = this.userRows.get(u.user_id)!;
        const active = row.last_active ?? this.dateJoinedTs(u);
        const [status, timestamp] = active + 70 >= row.last_connected ? ['active', active] : ['idle', row.last_connected];
        out[u.email] = {
          aggregated: { client: 'website', status, timestamp },
          website: { client: 'website', status, timestamp, pushable: false },
        };
      }
    }
    return out;
  }

  slimPresence(lastUpdateId?: number): { presences: Record<string, Record<string, number>>; maxId: number } {
    const presences: Record<string, Record<string, number>> = {};
    let maxId = -1;
    const cutoff = this.now - 14 * DAY;
    for (const u of this.users) {
      if (u.is_bot || !u.is_active) continue;
      if (this.featureLevel < ERA_FEATURE_LEVEL['7.0']) {
        const rows = [...(this.clientRows.get(u.user_id)?.values() ?? [])].filter((r) => r.timestamp >= cutoff);
        if (rows.length === 0) continue;
        const e: Record<string, number> = {};
        const active = rows.filter((r) => r.status === 'active').map((r) => r.timestamp);
        const idle = rows.filter((r) => r.status === 'idle').map((r) => r.timestamp);
        if (active.length) e.active_timestamp = Math.max(...active);
        if (idle.length) e.idle_timestamp = Math.max(...idle);
        presences[String(u.user_id)] = e;
        continue;
      }
      const row = this.userRows.get(u.user_id);
      if (!row) continue;
      if (lastUpdateId !== undefined && lastUpdateId > 0) {
        if (row.last_update_id <= lastUpdateId) continue;
      } else if (row.last_connected < cutoff) continue;
      presences[String(u.user_id)] = {
        active_timestamp: row.last_active ?? this.dateJoinedTs(u),
        idle_timestamp: row.last_connected,
      };
      maxId = Math.max(maxId, row.last_update_id);
    }
    return { presences, maxId };
  }

  // ---------------------------------------------------------------- HTTP

  async start(): Promise<string> {
    this.server = http.createServer((req, res) => {
      void this.handle(req, res).catch((e: unknown) => {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
        res.end(String(e));
      });
    });
    this.server.keepAliveTimeout = 70_000;
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.url;
  }

  async stop(): Promise<void> {
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server!.close(() => r()));
  }

  /** Open TCP connections to the fake (for socket-leak tests). */
  connections(): Promise<number> {
    return new Promise((r, j) => this.server!.getConnections((e, n) => (e ? j(e) : r(n))));
  }

  private json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    const text = JSON.stringify(body);
    // The server's clock is the fake's own: Date agrees with server_timestamp, as on a real server.
    const date = new Date(this.now * 1000).toUTCString();
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), date, ...headers });
    res.end(text);
  }

  private error(res: ServerResponse, status: number, msg: string, code: string | undefined, extra: Record<string, unknown> = {}): void {
    const body: Record<string, unknown> = { result: 'error', msg, ...extra };
    // Before FL 76 (5.0) direct json_error calls had no code; raised errors had one.
    if (code) body.code = code;
    this.json(res, status, body);
  }

  private authenticate(req: IncomingMessage, res: ServerResponse): FakeUser | undefined {
    const header = req.headers.authorization;
    const path = (req.url ?? '').split('?')[0]!;
    let user: FakeUser | undefined;
    if (path.startsWith('/json/')) {
      const m = /(?:^|;\s*)sessionid=([^;]+)/.exec(req.headers.cookie ?? '');
      user = m ? this.users.find((u) => u.api_key === decodeURIComponent(m[1]!)) : undefined;
      if (!user) {
        this.error(
          res,
          401,
          'Not logged in: API authentication or user session required',
          this.featureLevel >= 156 ? 'UNAUTHORIZED' : undefined,
        );
        return undefined;
      }
      return user;
    }
    if (!header) {
      this.error(res, 401, 'Missing authorization header for basic auth', this.featureLevel >= 156 ? 'UNAUTHORIZED' : undefined);
      return undefined;
    }
    const m = /^Basic (.+)$/.exec(header);
    const decoded = m ? Buffer.from(m[1]!, 'base64').toString('utf8') : '';
    const [email, key] = decoded.split(':');
    user = this.users.find((u) => u.email === email && u.api_key === key);
    if (!user) {
      res.setHeader('www-authenticate', 'Basic realm="zulip"');
      this.error(res, 401, 'Invalid API key', this.featureLevel >= 156 ? 'UNAUTHORIZED' : undefined);
      return undefined;
    }
    return user;
  }

  private async readParams(req: IncomingMessage, body: Buffer): Promise<Map<string, string>> {
    const params = new Map<string, string>();
    const q = (req.url ?? '').indexOf('?');
    if (q >= 0) for (const [k, v] of new URLSearchParams(req.url!.slice(q + 1))) params.set(k, v);
    const type = req.headers['content-type'] ?? '';
    if (type.startsWith('multipart/form-data')) {
      await new Promise<void>((resolve, reject) => {
        const bb = busboy({ headers: req.headers });
        bb.on('field', (k, v) => params.set(k, v));
        bb.on('close', resolve);
        bb.on('error', reject);
        bb.end(body);
      });
    } else if (body.length) {
      for (const [k, v] of new URLSearchParams(body.toString('utf8'))) params.set(k, v);
    }
    return params;
  }

  /** Django REQ/typed_endpoint JSON bool parsing, per era wording. */
  private jsonBool(params: Map<string, string>, name: string, res: ServerResponse): boolean | undefined | null {
    const raw = params.get(name);
    if (raw === undefined) return undefined;
    let v: unknown;
    try {
      v = JSON.parse(raw);
    } catch {
      this.error(res, 400, this.featureLevel >= 237 ? `${name} is not valid JSON` : `Argument "${name}" is not valid JSON.`, 'BAD_REQUEST');
      return null;
    }
    if (typeof v !== 'boolean') {
      this.error(res, 400, `${name} is not a boolean`, 'BAD_REQUEST');
      return null;
    }
    return v;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    const path = (req.url ?? '/').split('?')[0]!;
    const key = `${req.method} ${path}`;
    this.stats.requests.set(key, (this.stats.requests.get(key) ?? 0) + 1);
    this.seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
    if (this.override && (await this.override(req, res, body))) return;

    if (path.startsWith('/test/')) return this.testRoute(req, res, body, path);
    // Every server since 2.x serves its emoji codes among its static files, unauthenticated.
    if (req.method === 'GET' && path === '/static/generated/emoji/emoji_codes.json') return this.json(res, 200, EMOJI_CODES);
    const apiPath = path.replace(/^\/(api\/v1|json)\//, '/');
    switch (`${req.method} ${apiPath}`) {
      case 'GET /server_settings':
        return this.serverSettings(req, res);
      case 'POST /users/me/presence':
        return this.presence(req, res, body);
      case 'GET /users':
        return this.usersList(req, res);
      case 'GET /users/me':
        return this.ownUser(req, res);
      case 'POST /register':
        return this.register(req, res, body);
      case 'DELETE /events':
        return this.deleteQueue(req, res, body);
      case 'GET /events':
        return this.events(req, res);
      case 'POST /fetch_api_key':
        return this.fetchApiKey(req, res, body);
      case 'GET /messages':
        if (this.whole) return this.documented(req, res, eraAnswer('messages', this.featureLevel));
        break;
      default:
        break;
    }
    if (this.whole && req.method === 'GET' && /^\/messages\/[0-9]+$/.test(apiPath)) {
      return this.documented(req, res, eraAnswer('message', this.featureLevel));
    }
    // GET /users/{user_id} from 3.0 (feature level 1), GET /users/{email} from 4.0 (39).
    const single = /^\/users\/([^/]+)$/.exec(apiPath);
    if (req.method === 'GET' && single && (/^[0-9]+$/.test(single[1]!) ? this.featureLevel >= 1 : this.featureLevel >= 39)) {
      return this.singleUser(req, res, single[1]!);
    }
    this.error(res, 404, 'Endpoint does not exist.', 'BAD_REQUEST');
  }

  /**
   * POST /fetch_api_key: every user's password is `password`; the answer names the user by id
   * from feature level 171 (Zulip 7.0).
   */
  private async fetchApiKey(req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
    const params = await this.readParams(req, body);
    const user = this.users.find((u) => u.delivery_email === params.get('username') && !u.is_bot);
    if (!user || params.get('password') !== 'password') {
      return this.error(res, 401, 'Your username or password is incorrect', 'AUTHENTICATION_FAILED');
    }
    const answer: Record<string, unknown> = { result: 'success', msg: '', api_key: user.api_key, email: user.email };
    if (this.featureLevel >= 171) answer.user_id = user.user_id;
    this.json(res, 200, answer);
  }

  /** An answer as the API description documents it, to an authenticated caller. */
  private documented(req: IncomingMessage, res: ServerResponse, body: Record<string, unknown>): void {
    if (this.authenticate(req, res)) this.json(res, 200, body);
  }

  private serverSettings(req: IncomingMessage, res: ServerResponse): void {
    const body: Record<string, unknown> = {
      ...(this.whole ? eraAnswer('server_settings', this.featureLevel) : {}),
      result: 'success',
      msg: '',
      authentication_methods: { password: true, dev: false, email: true, ldap: false, remoteuser: false, github: false, google: false },
      zulip_version: this.era === '2.1' ? '2.1.7' : `${this.era}`,
      push_notifications_enabled: false,
      is_incompatible: false,
      email_auth_enabled: true,
      require_email_format_usernames: true,
      realm_uri: this.oneRealm ? 'https://chat.example.com' : `https://${(req.headers.host ?? 'chat.example.com').toLowerCase()}`,
      realm_name: 'Example',
      realm_icon: 'https://chat.example.com/static/images/logo.png',
      realm_description: '<p>An example realm</p>',
      external_authentication_methods: [],
    };
    if (this.featureLevel > 0) body.zulip_feature_level = this.featureLevel;
    this.json(res, 200, body);
  }

  private async presence(req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
    const user = this.authenticate(req, res);
    if (!user) return;
    if (user.is_bot)
      return this.error(res, 400, 'This endpoint does not accept bot requests.', this.featureLevel >= 122 ? 'BAD_REQUEST' : undefined);
    const params = await this.readParams(req, body);
    const status = params.get('status');
    if (status === undefined) return this.error(res, 400, "Missing 'status' argument", 'REQUEST_VARIABLE_MISSING', { var_name: 'status' });
    const pingOnly = this.jsonBool(params, 'ping_only', res);
    if (pingOnly === null) return;
    const newUserInput = this.jsonBool(params, 'new_user_input', res);
    if (newUserInput === null) return;
    let slim = false;
    if (this.featureLevel >= 25) {
      const s = this.jsonBool(params, 'slim_presence', res);
      if (s === null) return;
      slim = s === true;
    }
    let lastUpdateId: number | undefined;
    if (this.featureLevel >= 263 && params.has('last_update_id')) {
      const v = Number(params.get('last_update_id'));
      if (!Number.isInteger(v)) return this.error(res, 400, 'last_update_id is not an integer', 'BAD_REQUEST');
      lastUpdateId = v;
      slim = true;
    }
    if (status !== 'active' && status !== 'idle') return this.error(res, 400, `Invalid status: ${status}`, 'BAD_REQUEST');
    const ua = req.headers['user-agent'] ?? '';
    this.report(user.user_id, status, /ZulipMobile/.test(ua) ? 'ZulipMobile' : 'website');

    const known = new Set(['status', 'ping_only', 'new_user_input']);
    if (this.featureLevel >= 25) known.add('slim_presence');
    if (this.featureLevel >= 263) known.add('last_update_id');
    if (this.featureLevel >= 288) known.add('history_limit_days');
    const ignored = [...params.keys()].filter((k) => !known.has(k)).sort();
    const extra: Record<string, unknown> = this.featureLevel >= 167 && ignored.length ? { ignored_parameters_unsupported: ignored } : {};

    if (pingOnly) {
      this.stats.presencePing++;
      return this.json(res, 200, { result: 'success', msg: '', ...extra });
    }
    this.stats.presenceFull++;
    const out: Record<string, unknown> = { result: 'success', msg: '', server_timestamp: this.now };
    if (slim) {
      const { presences, maxId } = this.slimPresence(lastUpdateId);
      out.presences = presences;
      if (this.featureLevel >= 263) out.presence_last_update_id = maxId >= 0 ? maxId : (lastUpdateId ?? -1);
    } else {
      out.presences = this.legacyPresence();
      if (this.featureLevel >= 263) out.presence_last_update_id = this.slimPresence().maxId;
    }
    if (this.fullPresenceHeld) await this.fullPresenceHeld;
    if (this.fullPresenceDrip) return this.drip(res, { ...out, ...extra }, this.fullPresenceDrip);
    this.json(res, 200, { ...out, ...extra });
  }

  private async drip(res: ServerResponse, body: unknown, o: NonNullable<FakeZulip['fullPresenceDrip']>): Promise<void> {
    const text = Buffer.from(JSON.stringify(body));
    const date = new Date(this.now * 1000).toUTCString();
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': text.length, date });
    res.flushHeaders();
    const parts = 10;
    const size = Math.ceil(text.length / parts);
    for (let i = 0; i < parts - 1; i++) {
      res.write(text.subarray(i * size, (i + 1) * size));
      await new Promise((r) => setTimeout(r, o.ms / parts));
    }
    await o.until;
    if (o.cut) return void res.destroy();
    res.end(text.subarray((parts - 1) * size));
  }

  /** A user object as GET /users shows it in this era (§5.2), to `viewer` when given. */
  userObject(u: FakeUser, forOwn = false, viewer?: FakeUser): Record<string, unknown> {
    const fl = this.featureLevel;
    const o: Record<string, unknown> = {
      email: u.email,
      user_id: u.user_id,
      avatar_url: `https://secure.gravatar.com/avatar/${u.user_id}?d=identicon&version=${u.avatar_version}`,
      is_admin: u.role <= 200,
      is_guest: u.role === 600,
      is_bot: u.is_bot,
      full_name: u.full_name,
      timezone: u.timezone,
      is_active: u.is_active,
      date_joined: u.date_joined,
    };
    if (fl >= 6) o.avatar_version = u.avatar_version;
    if (fl >= 8) o.is_owner = u.role === 100;
    if (fl >= 59) o.role = u.role;
    if (fl >= 73) o.is_billing_admin = u.is_billing_admin;
    const viewerSeesEmails = this.emailAddressVisibility === 'admins' && viewer !== undefined && viewer.role <= 200;
    if (fl >= 163 || (fl >= 156 && forOwn) || viewerSeesEmails) o.delivery_email = u.delivery_email;
    if (u.is_bot) {
      o.bot_type = u.bot_type;
      // Before feature level 1 a bot names its owner by email (`bot_owner`).
      if (fl >= 1)
        o.bot_owner_id = u.bot_owner_id ?? null; // null for a bot without an owner, as the server sends it
      else o.bot_owner = u.bot_owner_id === undefined ? null : this.user(u.bot_owner_id).email;
    }
    return o;
  }

  /** A system bot as register's `cross_realm_bots` shows it in this era. */
  crossRealmBot(): Record<string, unknown> {
    const fl = this.featureLevel;
    const o: Record<string, unknown> = {
      email: 'notification-bot@zulip.com',
      user_id: 2,
      avatar_url: 'https://chat.example.com/static/images/logo/zulip-icon-128x128.png?version=1',
      is_admin: false,
      is_bot: true,
      full_name: 'Notification Bot',
      timezone: '',
      date_joined: '2019-01-01T00:00:00.000000+00:00',
    };
    // 2.1 builds these by hand (get_cross_realm_dicts): no bot fields, no cross-realm flag.
    if (fl === 0) return o;
    o.bot_type = 1;
    o.bot_owner_id = null;
    if (fl >= 10) Object.assign(o, { is_guest: false, is_active: true, avatar_version: 1 });
    if (fl >= 8) o.is_owner = false;
    if (fl >= 59) o.role = 400;
    if (fl >= 73) o.is_billing_admin = false;
    if (fl >= 83) o.is_system_bot = true;
    else o.is_cross_realm_bot = true;
    if (fl >= 163) o.delivery_email = 'notification-bot@zulip.com';
    return o;
  }

  /**
   * The legacy top-level settings of a register answer, by the event type that brings them
   * (update_display_settings, update_global_notifications; enter_sends with realm_user), as the
   * era's server has them: a setting appears only from the feature level that brought it.
   */
  legacySettings(u: FakeUser, want: (t: string) => boolean): Record<string, unknown> {
    const fl = this.featureLevel;
    const out: Record<string, unknown> = {};
    if (want('update_display_settings')) {
      Object.assign(out, {
        twenty_four_hour_time: true,
        dense_mode: true,
        starred_message_counts: false,
        fluid_layout_width: false,
        high_contrast_mode: false,
        translate_emoticons: false,
        default_language: 'en',
        left_side_userlist: false,
        emojiset: 'google',
        demote_inactive_streams: 1,
        timezone: u.timezone,
        emojiset_choices: [
          { key: 'google', text: 'Google modern' },
          { key: 'text', text: 'Plain text' },
        ],
      });
      if (fl >= 16) out.color_scheme = 2;
      else out.night_mode = true;
      if (fl >= 42) out.default_view = 'recent_topics';
    }
    if (want('update_global_notifications')) {
      Object.assign(out, {
        enable_stream_desktop_notifications: false,
        enable_stream_email_notifications: false,
        enable_stream_push_notifications: false,
        enable_stream_audible_notifications: false,
        notification_sound: 'zulip',
        enable_desktop_notifications: true,
        enable_sounds: false,
        enable_offline_email_notifications: true,
        enable_offline_push_notifications: true,
        enable_online_push_notifications: true,
        enable_digest_emails: true,
        enable_login_emails: true,
        message_content_in_email_notifications: true,
        pm_content_in_desktop_notifications: true,
        wildcard_mentions_notify: true,
        desktop_icon_count_display: 1,
        realm_name_in_notifications: false,
        available_notification_sounds: ['ding', 'zulip'],
      });
      if (fl >= 3) out.presence_enabled = u.presence_enabled;
      // Not a notification setting of register's before 5.0 (only Zulip Cloud sends such email).
      if (fl >= 89) out.enable_marketing_emails = false;
    }
    if (want('realm_user')) out.enter_sends = false;
    return out;
  }

  /** register's user_settings as 5.0 (feature level 89+) sends it. */
  userSettings(u: FakeUser): Record<string, unknown> {
    const { night_mode: _night, ...legacy } = this.legacySettings(u, () => true);
    return {
      ...legacy,
      color_scheme: 2,
      enable_marketing_emails: false,
      default_view: 'recent_topics',
      escape_navigates_to_default_view: true,
      enable_drafts_synchronization: true,
      email_notifications_batching_period_seconds: 120,
      send_private_typing_notifications: true,
      send_stream_typing_notifications: true,
      send_read_receipts: true,
      ...(this.featureLevel >= 125 ? { display_emoji_reaction_users: true } : {}),
    };
  }

  /** GET /users/{user_id} (3.0+) and GET /users/{email} (4.0+). */
  private singleUser(req: IncomingMessage, res: ServerResponse, key: string): void {
    const viewer = this.authenticate(req, res);
    if (!viewer) return;
    const q = new URLSearchParams((req.url ?? '').split('?')[1] ?? '');
    const email = decodeURIComponent(key).toLowerCase();
    const u = /^[0-9]+$/.test(key)
      ? this.users.find((x) => x.user_id === Number(key))
      : this.users.find((x) => x.email.toLowerCase() === email);
    if (!u) return this.error(res, 400, 'No such user', 'BAD_REQUEST');
    const o = this.userObject(u, u.user_id === viewer.user_id, viewer);
    if (!u.is_bot && q.get('include_custom_profile_fields') === 'true') o.profile_data = u.profile_data;
    this.json(res, 200, { result: 'success', msg: '', user: o });
  }

  private usersList(req: IncomingMessage, res: ServerResponse): void {
    const viewer = this.authenticate(req, res);
    if (!viewer) return;
    this.stats.usersList++;
    const withFields = new URLSearchParams((req.url ?? '').split('?')[1] ?? '').get('include_custom_profile_fields') === 'true';
    const members = this.users.map((u) => {
      const o = this.userObject(u, false, viewer);
      if (withFields && !u.is_bot) o.profile_data = u.profile_data;
      return o;
    });
    this.json(res, 200, { result: 'success', msg: '', members });
  }

  private ownUser(req: IncomingMessage, res: ServerResponse): void {
    const u = this.authenticate(req, res);
    if (!u) return;
    const fl = this.featureLevel;
    let o: Record<string, unknown>;
    if (fl < 10) {
      // 2.1's hand-built dict (get_profile_backend).
      o = {
        pointer: -1,
        client_id: 'a1b2c3d4e5f60718293a4b5c6d7e8f90',
        max_message_id: 30,
        user_id: u.user_id,
        avatar_url: `https://secure.gravatar.com/avatar/${u.user_id}?d=identicon&version=${u.avatar_version}`,
        full_name: u.full_name,
        email: u.email,
        is_bot: u.is_bot,
        is_admin: u.role <= 200,
        short_name: u.email.split('@')[0],
      };
    } else {
      o = { ...this.userObject(u, true, u), max_message_id: 30 };
    }
    if (!u.is_bot) o.profile_data = u.profile_data;
    this.json(res, 200, { result: 'success', msg: '', ...o });
  }

  private async register(req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
    if (this.isSpectator(req)) return this.spectatorRegister(req, res, body);
    const u = this.authenticate(req, res);
    if (!u) return;
    this.stats.register++;
    const params = await this.readParams(req, body);
    const types = params.has('fetch_event_types')
      ? (JSON.parse(params.get('fetch_event_types')!) as string[])
      : params.has('event_types')
        ? (JSON.parse(params.get('event_types')!) as string[])
        : undefined;
    const want = (t: string) => types === undefined || types.includes(t);
    const queueId = `queue-${Math.random().toString(36).slice(2)}`;
    this.openQueues.add(queueId);
    this.stats.queuesCreated++;
    if (this.whole) this.queueCapabilities.set(queueId, JSON.parse(params.get('client_capabilities') ?? '{}') as Capabilities);
    const out: Record<string, unknown> = {
      ...(this.whole ? eraAnswer('register', this.featureLevel) : {}),
      result: 'success',
      msg: '',
      queue_id: queueId,
      last_event_id: -1,
    };
    if (this.featureLevel >= 3 || want('zulip_version')) out.zulip_version = this.era;
    // The realm's URL, as server_settings names it (the description's example is a placeholder).
    if ('realm_uri' in out)
      out.realm_uri = this.oneRealm ? 'https://chat.example.com' : `https://${(req.headers.host ?? 'chat.example.com').toLowerCase()}`;
    if (this.featureLevel >= 3) out.zulip_feature_level = this.featureLevel;
    if (want('realm_user')) {
      out.realm_users = this.users.filter((x) => !x.is_bot).map((x) => this.userObject(x));
      out.realm_non_active_users = [];
      out.user_id = u.user_id;
      out.email = u.email;
      out.delivery_email = u.delivery_email;
      out.full_name = u.full_name;
      out.is_admin = u.role <= 200;
      out.cross_realm_bots = [this.crossRealmBot()];
    }
    Object.assign(out, this.legacySettings(u, want));
    if (this.featureLevel >= 89 && want('user_settings'))
      out.user_settings = { ...(out.user_settings as object | undefined), ...this.userSettings(u) };
    if (want('presence')) {
      const slim = this.featureLevel >= 25 && params.get('slim_presence') === 'true';
      if (slim) {
        const { presences, maxId } = this.slimPresence();
        out.presences = presences;
        if (this.featureLevel >= 263) out.presence_last_update_id = maxId;
      } else {
        out.presences = this.legacyPresence();
        if (this.featureLevel >= 263) out.presence_last_update_id = this.slimPresence().maxId;
      }
      if (this.featureLevel >= 70) out.server_timestamp = this.now;
    }
    this.json(res, 200, out);
  }

  /** A logged-out visitor of a web-public realm: `/json/` with no session at all (5.0+). */
  private isSpectator(req: IncomingMessage): boolean {
    return (
      this.spectators &&
      this.featureLevel >= ERA_FEATURE_LEVEL['5.0'] &&
      (req.url ?? '').startsWith('/json/') &&
      !/(?:^|;\s*)sessionid=/.test(req.headers.cookie ?? '')
    );
  }

  /** Zulip's register for a spectator: no event queue, and no presence of anyone. */
  private async spectatorRegister(req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
    this.stats.register++;
    const params = await this.readParams(req, body);
    const types = params.has('fetch_event_types') ? (JSON.parse(params.get('fetch_event_types')!) as string[]) : undefined;
    const out: Record<string, unknown> = {
      result: 'success',
      msg: '',
      queue_id: null,
      last_event_id: -1,
      zulip_version: this.era,
      zulip_feature_level: this.featureLevel,
    };
    if (types === undefined || types.includes('presence')) {
      out.presences = {};
      out.server_timestamp = this.now;
    }
    this.json(res, 200, out);
  }

  private async deleteQueue(req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
    if (!this.authenticate(req, res)) return;
    const params = await this.readParams(req, body);
    const id = params.get('queue_id');
    if (!id || !this.openQueues.has(id)) return this.error(res, 400, `Bad event queue ID: ${id}`, 'BAD_EVENT_QUEUE_ID', { queue_id: id });
    this.openQueues.delete(id);
    this.stats.queuesDeleted++;
    this.json(res, 200, { result: 'success', msg: '' });
  }

  /** Long poll: answers after `?delay_ms=` (default 50) with a heartbeat; `whole`: at once, with every documented event of the era. */
  private events(req: IncomingMessage, res: ServerResponse): void {
    if (this.whole) {
      const queue = new URLSearchParams((req.url ?? '').split('?')[1] ?? '').get('queue_id') ?? '';
      return this.documented(req, res, {
        result: 'success',
        msg: '',
        events: eraEvents(this.featureLevel, this.queueCapabilities.get(queue)),
      });
    }
    const delay = Number(new URLSearchParams((req.url ?? '').split('?')[1] ?? '').get('delay_ms') ?? 50);
    const t = setTimeout(() => this.json(res, 200, { result: 'success', msg: '', events: [{ type: 'heartbeat', id: 0 }] }), delay);
    res.on('close', () => clearTimeout(t));
  }

  private testRoute(req: IncomingMessage, res: ServerResponse, body: Buffer, path: string): void {
    const q = new URLSearchParams((req.url ?? '').split('?')[1] ?? '');
    switch (path) {
      case '/test/echo':
        return this.json(
          res,
          Number(q.get('status') ?? 200),
          {
            method: req.method,
            url: req.url,
            headers: req.headers,
            body: body.toString('base64'),
          },
          { 'x-upstream-header': 'kept', 'set-cookie': 'a=1; Path=/' },
        );
      case '/test/chunked': {
        // n chunks, `gap_ms` apart, so a test can see them arrive one by one.
        const n = Number(q.get('n') ?? 3);
        const gap = Number(q.get('gap_ms') ?? 100);
        res.writeHead(200, { 'content-type': 'text/plain' });
        let i = 0;
        const tick = () => {
          if (res.destroyed) return;
          res.write(`chunk ${i}\n`);
          if (++i < n) setTimeout(tick, gap);
          else res.end();
        };
        tick();
        return;
      }
      case '/test/slow': {
        const t = setTimeout(() => this.json(res, 200, { result: 'success', msg: '', slow: true }), Number(q.get('ms') ?? 1000));
        res.on('close', () => clearTimeout(t));
        return;
      }
      case '/test/big': {
        // A large streamed body: `kb` kilobytes in 16 KiB writes.
        const kb = Number(q.get('kb') ?? 1024);
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': kb * 1024 });
        const chunk = Buffer.alloc(1024, 120);
        let sent = 0;
        const pump = () => {
          while (sent < kb) {
            sent++;
            if (!res.write(chunk)) return void res.once('drain', pump);
          }
          res.end();
        };
        pump();
        return;
      }
      default:
        this.error(res, 404, 'no such test route', 'BAD_REQUEST');
    }
  }
}

/**
 * An override (FakeZulip.override) under which `method path` fails, whatever the query: HTTP 500
 * with Zulip's JSON, or the answer given (status, headers, body).
 */
export function failing(
  method: string,
  path: string,
  answer: { status: number; headers: Record<string, string>; body: string } = {
    status: 500,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ result: 'error', msg: 'Internal server error' }),
  },
): NonNullable<FakeZulip['override']> {
  return (req, res) => {
    if (req.method !== method || req.url?.split('?')[0] !== path) return false;
    res.writeHead(answer.status, answer.headers).end(answer.body);
    return true;
  };
}

export async function startFake(o: FakeOptions): Promise<FakeZulip> {
  const f = new FakeZulip(o);
  await f.start();
  return f;
}
