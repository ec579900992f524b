import type { IncomingMessage } from 'node:http';
import { recordedFacts } from './request-facts.js';
import type { PendingCounts } from './label-children.js';

/**
 * `zulip_compat_shim_client_requests_total{client, upstream_level, change}`: who is served what,
 * so an operator sees which clients still need which registry change on which server, and when
 * the shim can go (every count `change="none"`, or only clients that need nothing). Counted when
 * a client request's answer closes, once per change its handlers recorded (request-facts.ts), or
 * once as `none`; every label value from a fixed list below or the registry's, whatever a client
 * sends.
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
 * The `change` label: each change of the shim's registry (src/changes/) applied to the request,
 * by its feature name (the word server_settings' `zulip_compat_shim.emulated` uses), one count
 * per change applied; `none` when none was (passed through, or answered as the upstream
 * answered); `other` for a name the registry does not hold, which no handler records, so the
 * values stay the registry's whatever a request holds.
 */
export const CHANGE_NONE = 'none';
export const CHANGE_OTHER = 'other';

/** The most series client_requests_total can have, given the registry's number of changes. */
export function clientRequestSeriesBound(registryChanges: number): number {
  return CLIENT_FAMILIES.length * UPSTREAM_LEVELS.length * (registryChanges + 2);
}

/** Hosts whose upstream level is remembered for the requests passed through (cleared when full: X2). */
const MAX_HOSTS = 1_000;

/**
 * The counting hook, called when a client request's answer closes: one count per registry change
 * the request recorded (`changeIds`: the registry's feature names), or one `none`. A request the shim answered
 * itself carries its realm's feature level (its handler recorded it); one passed through does
 * not, and takes the level last recorded for its Host (`unknown` before any). On the
 * pass-through's hot path (B4): a Map read and a few prefix tests, no upstream call, no cache
 * of the upstream's (FeatureLevels would cost a realm key and an LRU read per request).
 */
export function clientRequestCounter(counts: PendingCounts, changeIds: ReadonlySet<string>): (req: IncomingMessage) => void {
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
    const client = clientFamily(req.headers['user-agent']);
    const applied = facts.changes;
    if (applied === undefined) counts.of(client, level, CHANGE_NONE).n++;
    else for (const id of applied) counts.of(client, level, changeIds.has(id) ? id : CHANGE_OTHER).n++;
  };
}
