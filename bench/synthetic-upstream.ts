import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A synthetic old Zulip server for the bench: every answer is pre-serialised, so the upstream
 * is never what limits a measurement. It answers what the shim calls for presence
 * (server_settings, GET /users, POST /users/me/presence), one small JSON endpoint for the
 * pass-through figures, and accepts any Basic auth.
 *
 * Two flavours: 2.1 (no zulip_feature_level, legacy per-client presence rows keyed by email)
 * and 7.0 (feature level 185, legacy or slim presence, one row per user). A churn rate changes
 * that fraction of the users per simulated minute, in small steps; each step regenerates the
 * pre-serialised bodies. The simulated clock may run faster than real time (B2).
 */

export type Flavour = '2.1' | '7.0';

export const FLAVOUR_FEATURE_LEVEL: Record<Flavour, number> = { '2.1': 0, '7.0': 185 };

export interface SyntheticOptions {
  flavour: Flavour;
  /** Users in the realm, all of them inside the 14-day presence window. */
  users: number;
  /** Fraction of users whose presence changes per simulated minute (0.02 = 2 %). */
  churnPerMinute: number;
  /** Real milliseconds per simulated minute (60000 = real time). */
  minuteMs: number;
  /** Churn is applied in this many steps per simulated minute; each step regenerates bodies. */
  stepsPerMinute: number;
  seed: number;
  /** Each `Host` a realm of its own (a Zulip server with a realm per subdomain): `server_settings` names it as its realm URL. */
  realmPerHost?: boolean;
}

export const DEFAULT_SYNTHETIC: SyntheticOptions = {
  flavour: '2.1',
  users: 10_000,
  churnPerMinute: 0.02,
  minuteMs: 60_000,
  stepsPerMinute: 10,
  seed: 42,
};

export interface UpstreamStats {
  /** Presence calls answered with presence data (not ping_only). */
  presenceFull: number;
  presencePing: number;
  usersList: number;
  /** GET /users/me: a caller's own user (the shim's caller lookup, its check of a new realm's caller). */
  ownUser: number;
  serverSettings: number;
  small: number;
  other: number;
  churnSteps: number;
  changedUsers: number;
  /** Total time spent regenerating bodies (ms). */
  regenMs: number;
}

/** The small JSON endpoint used for the pass-through figures (B4), and its answer. */
export const SMALL_PATH = '/api/v1/users/me/alert_words';
export const SMALL_BODY = '{"result":"success","msg":"","alert_words":["bench","compat"]}';
const HEARTBEAT = Buffer.from('{"result":"success","msg":"","events":[{"type":"heartbeat","id":0}],"queue_id":"q"}');

export const PRESENCE_PATH = '/api/v1/users/me/presence';
/** File uploads (passed through); the synthetic upstream answers with the bytes it received. */
export const UPLOAD_PATH = '/api/v1/user_uploads';

export const emailOf = (i: number) => `user${i}@zulip.example.com`;
export const userIdOf = (i: number) => 10 + i;

/** Basic auth for caller `i`: any credentials are accepted, distinct ones make distinct callers. */
export function basicAuth(i: number): string {
  return `Basic ${Buffer.from(`${emailOf(i)}:key${i}`).toString('base64')}`;
}

/** mulberry32: a small seeded PRNG, so runs are comparable. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WEB = 0;
const MOBILE = 1;

export class SyntheticZulip {
  readonly o: SyntheticOptions;
  stats: UpstreamStats = SyntheticZulip.emptyStats();
  /** When full presence fetches arrived (performance.now() ms), the most recent ones. */
  fetchTimes: number[] = [];
  url = '';
  private server?: http.Server;
  private readonly rand: () => number;
  // Per-user state: the newest report of each client (0 = none), whether it was active, and
  // the last time the user was active (7.0's last_active_time).
  private readonly ts: [Float64Array, Float64Array];
  private readonly active: [Uint8Array, Uint8Array];
  private readonly lastActive: Float64Array;
  private readonly legacyFragments: string[];
  private readonly slimFragments: string[];
  private legacyBody = Buffer.alloc(0);
  private slimBody = Buffer.alloc(0);
  private readonly usersBody: Buffer;
  private readonly settingsBody: Buffer;
  private readonly smallBody = Buffer.from(SMALL_BODY);
  private readonly pingBody = Buffer.from('{"result":"success","msg":""}');
  private readonly presenceHead = Buffer.from('{"result":"success","msg":"","presences":');
  private simBase: number;
  private realBase: number;
  private timer?: NodeJS.Timeout;
  private pendingChurn = 0;

  constructor(options: Partial<SyntheticOptions> = {}) {
    this.o = { ...DEFAULT_SYNTHETIC, ...options };
    const n = this.o.users;
    this.rand = prng(this.o.seed);
    this.simBase = Date.now() / 1000;
    this.realBase = performance.now();
    this.ts = [new Float64Array(n), new Float64Array(n)];
    this.active = [new Uint8Array(n), new Uint8Array(n)];
    this.lastActive = new Float64Array(n);
    this.legacyFragments = new Array<string>(n);
    this.slimFragments = new Array<string>(n);
    const now = Math.floor(this.simBase);
    for (let i = 0; i < n; i++) {
      // Everyone reported within the last 13 days; a third also use the mobile app.
      const web = now - Math.floor(this.rand() * 13 * 86_400);
      this.ts[WEB][i] = web;
      this.active[WEB][i] = this.rand() < 0.6 ? 1 : 0;
      if (this.rand() < 0.33) {
        this.ts[MOBILE][i] = now - Math.floor(this.rand() * 13 * 86_400);
        this.active[MOBILE][i] = this.rand() < 0.6 ? 1 : 0;
      }
      const newestActive = Math.max(this.active[WEB][i] ? web : 0, this.active[MOBILE][i] ? this.ts[MOBILE][i]! : 0);
      this.lastActive[i] = newestActive || web - Math.floor(this.rand() * 86_400);
      this.fragment(i);
    }
    this.rebuild();
    this.usersBody = this.buildUsers();
    this.settingsBody = this.buildSettings();
  }

  static emptyStats(): UpstreamStats {
    return {
      presenceFull: 0,
      presencePing: 0,
      usersList: 0,
      ownUser: 0,
      serverSettings: 0,
      small: 0,
      other: 0,
      churnSteps: 0,
      changedUsers: 0,
      regenMs: 0,
    };
  }

  get featureLevel(): number {
    return FLAVOUR_FEATURE_LEVEL[this.o.flavour];
  }

  /** The upstream's clock (float seconds), running minuteMs real ms per simulated minute. */
  simNow(): number {
    return this.simBase + ((performance.now() - this.realBase) / this.o.minuteMs) * 60;
  }

  /** Changes the length of a simulated minute; the clock goes on from where it is. */
  setMinute(minuteMs: number): void {
    this.simBase = this.simNow();
    this.realBase = performance.now();
    this.o.minuteMs = minuteMs;
    if (this.timer) this.startChurn();
  }

  /** Applies churn on a timer, stepsPerMinute times per simulated minute. */
  startChurn(): void {
    this.stopChurn();
    const every = Math.max(1, Math.round(this.o.minuteMs / this.o.stepsPerMinute));
    this.timer = setInterval(() => this.churnStep(), every);
  }

  stopChurn(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One churn step: 1/stepsPerMinute of the per-minute churn, then the bodies are rebuilt. */
  churnStep(): void {
    this.pendingChurn += (this.o.users * this.o.churnPerMinute) / this.o.stepsPerMinute;
    const k = Math.floor(this.pendingChurn);
    this.pendingChurn -= k;
    if (k === 0) return;
    const t = Math.floor(this.simNow());
    for (let j = 0; j < k; j++) {
      const i = Math.floor(this.rand() * this.o.users);
      const client = this.ts[MOBILE][i]! > 0 && this.rand() < 0.5 ? MOBILE : WEB;
      const isActive = this.rand() < 0.7;
      this.ts[client][i] = t;
      this.active[client][i] = isActive ? 1 : 0;
      if (isActive) this.lastActive[i] = t;
      this.fragment(i);
    }
    this.stats.churnSteps++;
    this.stats.changedUsers += k;
    this.rebuild();
  }

  /**
   * One known change: user `i` reports active from the web app now (the simulated clock's
   * whole second, returned). The replicas bench marks its last change with it and watches for it.
   */
  touch(i: number): number {
    const t = Math.floor(this.simNow());
    this.ts[WEB][i] = t;
    this.active[WEB][i] = 1;
    this.lastActive[i] = t;
    this.fragment(i);
    this.stats.changedUsers++;
    this.rebuild();
    return t;
  }

  /** The full presence answer a plain poll gets (legacy format), as bytes. */
  presenceAnswer(slim: boolean): Buffer {
    const body = slim && this.o.flavour === '7.0' ? this.slimBody : this.legacyBody;
    return Buffer.concat([this.presenceHead, body, this.presenceTail()]);
  }

  async start(port = 0): Promise<string> {
    this.server = http.createServer((req, res) => this.handle(req, res));
    this.server.keepAliveTimeout = 65_000;
    this.server.headersTimeout = 66_000;
    await new Promise<void>((r) => this.server!.listen(port, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.url;
  }

  async stop(): Promise<void> {
    this.stopChurn();
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server!.close(() => r()));
  }

  // ------------------------------------------------------------------ bodies

  private fragment(i: number): void {
    const email = emailOf(i);
    const web = this.ts[WEB][i]!;
    const mobile = this.ts[MOBILE][i]!;
    const status = (c: number) => (this.active[c]![i] ? 'active' : 'idle');
    if (this.o.flavour === '2.1') {
      // 2.1: one row per client, plus `aggregated` (the newest row).
      let s = `"${email}":{"website":{"client":"website","status":"${status(WEB)}","timestamp":${web},"pushable":false}`;
      if (mobile > 0) s += `,"ZulipMobile":{"client":"ZulipMobile","status":"${status(MOBILE)}","timestamp":${mobile},"pushable":true}`;
      const newest = mobile > web ? MOBILE : WEB;
      const name = newest === MOBILE ? 'ZulipMobile' : 'website';
      s += `,"aggregated":{"client":"${name}","status":"${status(newest)}","timestamp":${Math.max(web, mobile)}}}`;
      this.legacyFragments[i] = s;
      return;
    }
    // 7.0: one row per user (last_active_time, last_connected_time), legacy view derived.
    const connected = Math.max(web, mobile);
    const active = Math.min(this.lastActive[i]!, connected);
    const [st, t] = active + 70 >= connected ? ['active', active] : ['idle', connected];
    this.legacyFragments[i] =
      `"${email}":{"aggregated":{"client":"website","status":"${st}","timestamp":${t}},"website":{"client":"website","status":"${st}","timestamp":${t},"pushable":false}}`;
    this.slimFragments[i] = `"${userIdOf(i)}":{"active_timestamp":${active},"idle_timestamp":${connected}}`;
  }

  private rebuild(): void {
    const t0 = performance.now();
    this.legacyBody = Buffer.from(`{${this.legacyFragments.join(',')}}`);
    if (this.o.flavour === '7.0') this.slimBody = Buffer.from(`{${this.slimFragments.join(',')}}`);
    this.stats.regenMs += performance.now() - t0;
  }

  private presenceTail(): Buffer {
    return Buffer.from(`,"server_timestamp":${this.simNow().toFixed(6)}}`);
  }

  private buildUsers(): Buffer {
    const members: string[] = [];
    const modern = this.o.flavour === '7.0';
    for (let i = 0; i < this.o.users; i++) {
      const joined = new Date((1_500_000_000 + i * 3600) * 1000).toISOString().replace('Z', '+00:00');
      let m =
        `{"email":"${emailOf(i)}","user_id":${userIdOf(i)},"avatar_url":"https://secure.gravatar.com/avatar/${i}?d=identicon&version=1",` +
        `"avatar_version":1,"is_admin":false,"is_guest":false,"is_bot":false,"full_name":"User ${i}","timezone":"",` +
        `"is_active":true,"date_joined":"${joined}","profile_data":{}`;
      if (modern) m += `,"is_owner":false,"role":400,"is_billing_admin":false,"delivery_email":null`;
      members.push(`${m}}`);
    }
    return Buffer.from(`{"result":"success","msg":"","members":[${members.join(',')}]}`);
  }

  /** The caller's own user, by the address in its Basic credentials (any key is accepted, as in basicAuth). */
  private ownUserBody(authorization: string | undefined): Buffer {
    const decoded = Buffer.from(/^Basic (.+)$/.exec(authorization ?? '')?.[1] ?? '', 'base64').toString('utf8');
    const i = Number(/^user(\d+)@/.exec(decoded)?.[1] ?? 0) % this.o.users;
    const role = this.o.flavour === '7.0' ? ',"is_owner":false,"role":400,"is_billing_admin":false' : '';
    return Buffer.from(
      `{"result":"success","msg":"","email":"${emailOf(i)}","user_id":${userIdOf(i)},"full_name":"User ${i}","is_admin":false,"is_bot":false${role}}`,
    );
  }

  private buildSettings(host?: string): Buffer {
    const body: Record<string, unknown> = {
      result: 'success',
      msg: '',
      authentication_methods: { password: true, dev: false },
      zulip_version: this.o.flavour === '2.1' ? '2.1.7' : '7.0',
      push_notifications_enabled: false,
      email_auth_enabled: true,
      require_email_format_usernames: true,
      realm_uri: host === undefined ? 'http://127.0.0.1' : `http://${host}`,
      realm_name: 'Bench',
      realm_description: '<p>A synthetic realm</p>',
      external_authentication_methods: [],
    };
    if (this.featureLevel > 0) body.zulip_feature_level = this.featureLevel;
    return Buffer.from(JSON.stringify(body));
  }

  // ------------------------------------------------------------------ HTTP

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      // The upstream's clock, as its server_timestamp: a real server's Date header and
      // server_timestamp come from one clock, and the shim times an accepted report by the
      // first (P15).
      res.setHeader('date', new Date(this.simNow() * 1000).toUTCString());
      const path = (req.url ?? '/').split('?')[0]!;
      const route = `${req.method} ${path.replace(/^\/json\//, '/api/v1/')}`;
      switch (route) {
        case 'GET /api/v1/server_settings':
          this.stats.serverSettings++;
          return send(res, [this.o.realmPerHost ? this.buildSettings(req.headers.host) : this.settingsBody]);
        case 'GET /api/v1/users':
          this.stats.usersList++;
          return send(res, [this.usersBody]);
        case 'GET /api/v1/users/me':
          this.stats.ownUser++;
          return send(res, [this.ownUserBody(req.headers.authorization)]);
        case `GET ${SMALL_PATH}`:
          this.stats.small++;
          return send(res, [this.smallBody]);
        case 'GET /api/v1/events': {
          // A long poll: held until the client goes, or answered with a heartbeat after 90 s.
          this.stats.other++;
          const timer = setTimeout(() => send(res, [HEARTBEAT]), 90_000);
          res.on('close', () => clearTimeout(timer));
          return;
        }
        case `POST ${UPLOAD_PATH}`: {
          // An upload: answered once the whole body has come, with its size (bench/slow-upload.ts).
          this.stats.other++;
          const bytes = chunks.reduce((n, c) => n + c.length, 0);
          return send(res, [Buffer.from(`{"result":"success","msg":"","uri":"/user_uploads/1/bench","bytes":${bytes}}`)]);
        }
        case `POST ${PRESENCE_PATH}`: {
          const form = new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
          if (form.get('ping_only') === 'true') {
            this.stats.presencePing++;
            return send(res, [this.pingBody]);
          }
          this.stats.presenceFull++;
          if (this.fetchTimes.length >= 10_000) this.fetchTimes.shift();
          this.fetchTimes.push(performance.now());
          const slim = form.get('slim_presence') === 'true' && this.o.flavour === '7.0';
          return send(res, [this.presenceHead, slim ? this.slimBody : this.legacyBody, this.presenceTail()]);
        }
        default:
          this.stats.other++;
          res.writeHead(404, { 'content-type': 'application/json' });
          res.end('{"result":"error","msg":"Endpoint does not exist.","code":"BAD_REQUEST"}');
      }
    });
  }
}

function send(res: ServerResponse, parts: Buffer[]): void {
  let length = 0;
  for (const p of parts) length += p.length;
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': length });
  res.cork();
  for (const p of parts) res.write(p);
  res.end();
  res.uncork();
}

/** What a realm-per-Host flood asks of one realm: its own Host, a user's credentials. */
export interface RealmVisit {
  method: 'POST' | 'GET';
  path: string;
  status: number;
}

/**
 * X2, X12's flood of realms: a new client of the realm at Host `realm-<i>.flood.test` polls its
 * presence and reads its own profile, as user `user` of it; each answer's status, undefined where
 * the request failed. The benches and the flood test drive the shim with it.
 */
export async function visitRealm(
  pool: {
    request(o: {
      method: 'POST' | 'GET';
      path: string;
      headers: Record<string, string>;
      body?: string;
    }): Promise<{ statusCode: number; body: { dump(): Promise<void> } }>;
  },
  i: number,
  user: number,
): Promise<Array<RealmVisit | { method: string; path: string; status: undefined }>> {
  const headers = { host: `realm-${i}.flood.test`, authorization: basicAuth(user) };
  const requests = [
    {
      method: 'POST' as const,
      path: PRESENCE_PATH,
      headers: { ...headers, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'status=active&last_update_id=-1',
    },
    { method: 'GET' as const, path: '/api/v1/users/me', headers },
  ];
  const out: Array<RealmVisit | { method: string; path: string; status: undefined }> = [];
  for (const r of requests) {
    try {
      const res = await pool.request(r);
      await res.body.dump();
      out.push({ method: r.method, path: r.path, status: res.statusCode });
    } catch {
      out.push({ method: r.method, path: r.path, status: undefined });
    }
  }
  return out;
}
