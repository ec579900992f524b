import type { IncomingMessage } from 'node:http';
import { recordedFacts } from './request-facts.js';
import type { PendingCounts } from './label-children.js';

/**
 * `zulip_compat_shim_client_requests_total{client, upstream_level, change}`: who is served what,
 * so an operator sees which clients still need which translation on which server, and when the
 * shim can go (every count `change="none"`, or only clients that need nothing). Counted once per
 * client request when its answer closes, from what the handler recorded (request-facts.ts); every
 * label value from a fixed list below, whatever a client sends.
 */

/**
 * Client families, from the User-Agent each sends: the Zulip mobile app (zulip-flutter), the
 * legacy React Native app, zulip-terminal, the Python bindings (bots, integrations), zulip-js
 * (under Node its fetch's `node-fetch/…`), the desktop app, any other browser (the web app),
 * everything else `other`. First match wins: the desktop app's agent also names Mozilla.
 */
export const CLIENT_FAMILIES = [
  'ZulipFlutter',
  'ZulipMobile',
  'ZulipTerminal',
  'ZulipPython',
  'zulip-js',
  'ZulipElectron',
  'browser',
  'other',
] as const;
export type ClientFamily = (typeof CLIENT_FAMILIES)[number];

export function clientFamily(userAgent: string | undefined): ClientFamily {
  if (!userAgent) return 'other';
  if (userAgent.startsWith('Zulip')) {
    if (userAgent.startsWith('ZulipFlutter/')) return 'ZulipFlutter';
    if (userAgent.startsWith('ZulipMobile/')) return 'ZulipMobile';
    if (userAgent.startsWith('ZulipTerminal/')) return 'ZulipTerminal';
    if (userAgent.startsWith('ZulipPython/')) return 'ZulipPython';
    if (userAgent.startsWith('ZulipJS/')) return 'zulip-js';
  }
  if (userAgent.startsWith('node-fetch/')) return 'zulip-js';
  if (userAgent.includes('ZulipElectron/')) return 'ZulipElectron';
  if (userAgent.startsWith('Mozilla/')) return 'browser';
  return 'other';
}

/**
 * The feature level each Zulip major version was released at, newest first (the levels the
 * shim's tests give each era). A level between two releases is a development build of the next
 * one, as Zulip's API changelog lists it: 186 to 237 is `8`.
 */
const RELEASES: ReadonlyArray<readonly [level: number, major: string]> = [
  [0, '2.1'],
  [25, '3'],
  [65, '4'],
  [122, '5'],
  [156, '6'],
  [185, '7'],
  [237, '8'],
];
export const UPSTREAM_LEVELS = [...RELEASES.map(([, major]) => major), '9+', 'unknown'] as const;

/** The Zulip major version a feature level belongs to; `unknown` when the shim has not asked. */
export function upstreamLevel(featureLevel: number | undefined): string {
  if (featureLevel === undefined) return 'unknown';
  for (const [level, major] of RELEASES) if (featureLevel <= level) return major;
  return '9+';
}

/**
 * What the shim did to a request, from the kind its handler recorded: `none` (passed through
 * untouched, or answered as the upstream answered), `presence` (the modern presence API:
 * `last_update_id`, the modern format), `user_objects` (the own profile, the user list or a
 * user, filled in by the user-object changes above the realm's level), `register` (a register
 * answer made continuable, its user lists filled in), `app` (the mobile app's requests and
 * answers translated between its level and the server's, M2), `other`.
 */
export const CHANGES = ['none', 'presence', 'user_objects', 'register', 'app', 'other'] as const;
const CHANGE_OF_KIND: Readonly<Record<string, (typeof CHANGES)[number]>> = {
  passthrough: 'none',
  'passthrough-large': 'none',
  legacy_full: 'presence',
  modern_full: 'presence',
  delta: 'presence',
  resync: 'presence',
  store_away: 'presence',
  ping: 'presence',
  own_profile: 'user_objects',
  users: 'user_objects',
  user: 'user_objects',
  register: 'register',
  'app-translated': 'app',
};

export function changeOf(kind: string | undefined): (typeof CHANGES)[number] {
  return kind === undefined ? 'none' : (CHANGE_OF_KIND[kind] ?? 'other');
}

/** Hosts whose upstream level is remembered for the requests passed through (cleared when full: X2). */
const MAX_HOSTS = 1_000;

/**
 * The counting hook, called when a client request's answer closes. A request the shim answered
 * itself carries its realm's feature level (its handler recorded it); one passed through does
 * not, and takes the level last recorded for its Host (`unknown` before any). On the
 * pass-through's hot path (B4): a Map read and a few prefix tests, no upstream call, no cache
 * of the upstream's (FeatureLevels would cost a realm key and an LRU read per request).
 */
export function clientRequestCounter(counts: PendingCounts): (req: IncomingMessage) => void {
  const levelOfHost = new Map<string, string>();
  return (req) => {
    const facts = recordedFacts(req);
    const host = req.headers.host ?? '';
    let level: string;
    if (facts.featureLevel === undefined) level = levelOfHost.get(host) ?? 'unknown';
    else {
      level = upstreamLevel(facts.featureLevel);
      if (levelOfHost.get(host) !== level) {
        if (levelOfHost.size >= MAX_HOSTS) levelOfHost.clear();
        levelOfHost.set(host, level);
      }
    }
    counts.of(clientFamily(req.headers['user-agent']), level, changeOf(facts.kind)).n++;
  };
}
