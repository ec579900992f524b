import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A lean stand-in for a large old Zulip server, for the soak test: answers are prepared once
 * and reused, nothing is remembered per request, so its memory stays flat and the shim's is what
 * moves. Speaks just what the shim and the soak clients use, in the 2.1 (legacy, one row per
 * user) or 7.0 (slim, exact) shape: server_settings, presence, users, users/me, register
 * (own-user fields only), DELETE events, and pass-through paths (messages, a short long poll).
 *
 * The upstream clock is the real one (server_timestamp and Date agree). A share of answers,
 * `faultRate`, are 429s marked `x-synthetic-fault`: errors the upstream caused.
 */

export type SyntheticEra = '2.1' | '7.0';

export interface SyntheticOptions {
  users: number;
  era?: SyntheticEra;
  /** Share of answers that are the upstream's own 429 (0..1). */
  faultRate?: number;
  /** Other users' status reports per second, in the background, until quiet(). */
  changesPerSecond?: number;
  /** Full presence answers are rebuilt at most this often (a busy server's own caching). */
  rebuildMs?: number;
}

interface Row {
  status: 'active' | 'idle';
  /** Last report, whole seconds. */
  timestamp: number;
  /** Last active report (7.0 meaning), whole seconds. */
  lastActive: number;
  /** 7.0: the server's presence row id. */
  updateId: number;
  /** 2.1: the latest active time a full answer showed (what the shim can have seen, P14). */
  shownActive?: number;
}

const FIRST_ID = 1000;
const JOINED = 1_600_000_000;

const now = () => Date.now() / 1000;

export class SyntheticZulip {
  readonly era: SyntheticEra;
  readonly featureLevel: number;
  readonly n: number;
  url = '';
  readonly stats = { requests: 0, faults: 0, fullPresence: 0 };
  private readonly faultRate: number;
  private readonly rebuildMs: number;
  private readonly rows = new Map<number, Row>();
  private readonly byAuth = new Map<string, number>();
  private readonly authOf: string[] = [];
  private sequence = 0;
  private dirty = true;
  private full?: { json: Buffer; builtAt: number; serverTimestamp: number };
  private usersJson?: Buffer;
  private readonly serverSettings: Buffer;
  private server?: http.Server;
  private ticker?: NodeJS.Timeout;
  private queue = 0;

  constructor(private readonly o: SyntheticOptions) {
    this.era = o.era ?? '2.1';
    this.featureLevel = this.era === '2.1' ? 0 : 185;
    this.n = o.users;
    this.faultRate = o.faultRate ?? 0;
    this.rebuildMs = o.rebuildMs ?? 1000;
    const t = Math.floor(now());
    for (let i = 0; i < this.n; i++) {
      const id = FIRST_ID + i;
      const auth = `Basic ${Buffer.from(`${this.email(id)}:key${id}secretSoak`).toString('base64')}`;
      this.byAuth.set(auth, id);
      this.authOf[i] = auth;
      // Everyone was seen in the last day; a third of them last active a while ago.
      const seen = t - ((i * 7919) % 86_400);
      this.rows.set(id, {
        status: i % 3 === 0 ? 'idle' : 'active',
        timestamp: seen,
        lastActive: seen - (i % 3 === 0 ? 600 : 0),
        updateId: ++this.sequence,
      });
    }
    const settings: Record<string, unknown> = {
      result: 'success',
      msg: '',
      zulip_version: this.era === '2.1' ? '2.1.7' : '7.0',
      realm_uri: 'https://soak.example',
      realm_name: 'Soak',
    };
    if (this.featureLevel > 0) settings.zulip_feature_level = this.featureLevel;
    this.serverSettings = Buffer.from(JSON.stringify(settings));
  }

  email(id: number): string {
    return `u${id}@soak.example`;
  }

  /** Basic auth for the i-th user (0-based). */
  auth(i: number): string {
    return this.authOf[i]!;
  }

  userId(i: number): number {
    return FIRST_ID + i;
  }

  async start(): Promise<string> {
    this.server = http.createServer((req, res) => this.handle(req, res));
    this.server.keepAliveTimeout = 70_000;
    this.server.maxHeadersCount = 100;
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    const perTick = Math.max(1, Math.round((this.o.changesPerSecond ?? 50) / 4));
    let k = 0;
    this.ticker = setInterval(() => {
      for (let j = 0; j < perTick; j++) {
        k = (k * 1_103_515_245 + 12_345) % 2 ** 31;
        this.report(FIRST_ID + (k % this.n), k % 5 === 0 ? 'idle' : 'active');
      }
    }, 250);
    return this.url;
  }

  /** No more background changes (the soak's quiet period). */
  quiet(): void {
    clearInterval(this.ticker);
  }

  async stop(): Promise<void> {
    this.quiet();
    this.server?.closeAllConnections();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }

  private report(id: number, status: 'active' | 'idle'): void {
    const row = this.rows.get(id)!;
    const t = Math.floor(now());
    if (row.status === status && row.timestamp === t) return;
    row.status = status;
    row.timestamp = t;
    if (status === 'active') row.lastActive = t;
    row.updateId = ++this.sequence;
    this.dirty = true;
  }

  /** What a modern server shows for each user now (P2, from the era's own rows). */
  expectedModern(): Map<string, { active_timestamp: number; idle_timestamp: number; orActive?: number }> {
    const out = new Map<string, { active_timestamp: number; idle_timestamp: number; orActive?: number }>();
    for (const [id, r] of this.rows) {
      if (this.era === '2.1') {
        // One client row: its time is the last report; active only if that report was. An idle
        // report does not take back an active time a full answer showed (P14). Nor one the shim
        // recorded from the user's own accepted active report (P15), which no answer need have
        // shown before the idle report replaced it: then the last active report's time
        // (`orActive`), where the shim's caller lookup for that report succeeded.
        const active = r.status === 'active' ? r.timestamp : (r.shownActive ?? Math.min(JOINED, r.timestamp));
        const orActive = r.status !== 'active' && r.lastActive > active ? r.lastActive : undefined;
        out.set(String(id), { active_timestamp: active, idle_timestamp: r.timestamp, ...(orActive === undefined ? {} : { orActive }) });
      } else {
        out.set(String(id), { active_timestamp: r.lastActive, idle_timestamp: r.timestamp });
      }
    }
    return out;
  }

  private fullPresence(): { json: Buffer; serverTimestamp: number } {
    const t = Date.now();
    if (!this.full || (this.dirty && t - this.full.builtAt >= this.rebuildMs)) {
      this.dirty = false;
      const serverTimestamp = t / 1000;
      const parts: string[] = [];
      for (const [id, r] of this.rows) {
        if (this.era === '2.1') {
          if (r.status === 'active') r.shownActive = Math.max(r.shownActive ?? 0, r.timestamp);
          const row = `{"client":"website","status":"${r.status}","timestamp":${r.timestamp},"pushable":false}`;
          parts.push(
            `"${this.email(id)}":{"website":${row},"aggregated":{"client":"website","status":"${r.status}","timestamp":${r.timestamp}}}`,
          );
        } else {
          parts.push(`"${id}":{"active_timestamp":${r.lastActive},"idle_timestamp":${r.timestamp}}`);
        }
      }
      const json = Buffer.from(`{"result":"success","msg":"","server_timestamp":${serverTimestamp},"presences":{${parts.join(',')}}}`);
      this.full = { json, builtAt: t, serverTimestamp };
    }
    return this.full;
  }

  private users(): Buffer {
    this.usersJson ??= Buffer.from(
      JSON.stringify({
        result: 'success',
        msg: '',
        members: [...this.rows.keys()].map((id) => ({
          email: this.email(id),
          user_id: id,
          full_name: `Soak User ${id}`,
          is_admin: false,
          is_guest: false,
          is_bot: false,
          is_active: true,
          timezone: '',
          date_joined: new Date(JOINED * 1000).toISOString().replace('Z', '+00:00'),
          avatar_url: `https://secure.gravatar.com/avatar/${id}`,
        })),
      }),
    );
    return this.usersJson;
  }

  private send(res: ServerResponse, status: number, body: Buffer | string, extra: Record<string, string> = {}): void {
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': String(bytes.length),
      date: new Date().toUTCString(),
      ...extra,
    });
    res.end(bytes);
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => this.answer(req, res, Buffer.concat(chunks).toString('utf8')));
  }

  private answer(req: IncomingMessage, res: ServerResponse, body: string): void {
    this.stats.requests++;
    const [path = '/', query = ''] = (req.url ?? '/').split('?');
    const key = `${req.method} ${path.replace(/^\/(api\/v1|json)\//, '/')}`;
    if (key === 'GET /server_settings') return this.send(res, 200, this.serverSettings);
    if (this.faultRate > 0 && Math.random() < this.faultRate) {
      this.stats.faults++;
      return this.send(res, 429, '{"result":"error","msg":"API usage exceeded rate limit","retry-after":1.5}', {
        'retry-after': '2',
        'x-synthetic-fault': 'yes',
      });
    }
    const user = this.byAuth.get(req.headers.authorization ?? '');
    if (user === undefined)
      return this.send(res, 401, '{"result":"error","msg":"Invalid API key"}', { 'www-authenticate': 'Basic realm="zulip"' });
    switch (key) {
      case 'POST /users/me/presence': {
        const p = new URLSearchParams(body);
        const status = p.get('status');
        if (status !== 'active' && status !== 'idle')
          return this.send(
            res,
            400,
            '{"result":"error","msg":"Missing \'status\' argument","var_name":"status","code":"REQUEST_VARIABLE_MISSING"}',
          );
        this.report(user, status);
        if (p.get('ping_only') === 'true') return this.send(res, 200, '{"result":"success","msg":""}');
        this.stats.fullPresence++;
        return this.send(res, 200, this.fullPresence().json);
      }
      case 'GET /users':
        return this.send(res, 200, this.users());
      case 'GET /users/me':
        return this.send(
          res,
          200,
          JSON.stringify({
            result: 'success',
            msg: '',
            pointer: -1,
            client_id: 'c0ffee',
            max_message_id: 1,
            user_id: user,
            avatar_url: `https://secure.gravatar.com/avatar/${user}`,
            full_name: `Soak User ${user}`,
            email: this.email(user),
            is_bot: false,
            is_admin: false,
            short_name: `u${user}`,
          }),
        );
      case 'POST /register':
        // Own-user fields only (the shim's delivery_email lookup); no realm_users list.
        return this.send(
          res,
          200,
          JSON.stringify({
            result: 'success',
            msg: '',
            queue_id: `q-${++this.queue}`,
            last_event_id: -1,
            user_id: user,
            email: this.email(user),
            delivery_email: `person${user}@soak.example.org`,
          }),
        );
      case 'DELETE /events':
        return this.send(res, 200, '{"result":"success","msg":""}');
      case 'GET /events': {
        // A short long poll: a heartbeat after `hold_ms` (default 1 s).
        const hold = Math.min(Number(new URLSearchParams(query).get('hold_ms') ?? 1000), 10_000);
        const t = setTimeout(() => this.send(res, 200, '{"result":"success","msg":"","events":[{"type":"heartbeat","id":0}]}'), hold);
        res.on('close', () => clearTimeout(t));
        return;
      }
      case 'GET /messages':
        return this.send(
          res,
          200,
          `{"result":"success","msg":"","found_newest":true,"messages":[{"id":1,"content":"<p>soak</p>","sender_id":${user}}]}`,
        );
      default:
        return this.send(res, 404, '{"result":"error","msg":"Endpoint does not exist.","code":"BAD_REQUEST"}');
    }
  }
}
