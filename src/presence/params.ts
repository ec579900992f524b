import { badRequest } from '../http/errors.js';
import type { Params } from '../http/body.js';
import { FL } from '../upstream/feature-level.js';

/**
 * Parameters of POST …/users/me/presence, read the way a modern server reads them. Values are
 * JSON-encoded strings. `status`, `ping_only`, `new_user_input` and `slim_presence` are left
 * for the upstream to validate (its errors go back by E1); `last_update_id` and
 * `history_limit_days`, which old servers do not know, are validated here (E3).
 */

/** Every parameter the endpoint uses, shim and upstream together (P11). */
export const PRESENCE_PARAMS = new Set(['status', 'ping_only', 'new_user_input', 'slim_presence', 'last_update_id', 'history_limit_days']);

export interface PresenceRequest {
  pingOnly: boolean;
  slimPresence: boolean;
  lastUpdateId: number | undefined;
  /** The client's `last_update_id` as it wrote it (trimmed): echoed exactly where a double cannot hold it (X1). */
  lastUpdateIdText?: string | undefined;
  historyLimitDays: number | undefined;
  /** Values the upstream validates that it will reject, before 3.0 (which has no slim_presence)… */
  invalidBefore30: boolean;
  /** …and from 3.0 on. */
  invalidFrom30: boolean;
  /** P11: parameters neither the shim nor the upstream uses, sorted. */
  ignored: string[];
  /** Raw values of the parameters the upstream validates, to forward unchanged. */
  raw: ReadonlyMap<string, string>;
}

const INTEGER = /^\s*-?(0|[1-9]\d*)\s*$/;

/** E3: the modern server's strict JSON int (pydantic): `1.5`, `true`, `"5"` are not integers. */
export function parseJsonInt(name: string, raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    throw badRequest(`${name} is not valid JSON`);
  }
  if (typeof v !== 'number' || !INTEGER.test(raw) || !Number.isFinite(v)) throw badRequest(`${name} is not an integer`);
  return v === 0 ? 0 : v; // -0 is 0
}

/** A JSON boolean as the upstream reads it; `undefined` for absent, `null` for invalid. */
export function readJsonBool(raw: string | undefined): boolean | undefined | null {
  if (raw === undefined) return undefined;
  try {
    const v: unknown = JSON.parse(raw);
    return typeof v === 'boolean' ? v : null;
  } catch {
    return null;
  }
}

/** Reads the parameters; throws E3's errors for `history_limit_days` / `last_update_id`. */
export function parsePresenceRequest(params: Params): PresenceRequest {
  // A modern server parses its parameters in alphabetical order: history_limit_days first.
  const historyLimitDays = parseJsonInt('history_limit_days', params.get('history_limit_days'));
  const lastUpdateId = parseJsonInt('last_update_id', params.get('last_update_id'));
  const status = params.get('status');
  const pingOnly = readJsonBool(params.get('ping_only'));
  const newUserInput = readJsonBool(params.get('new_user_input'));
  const slim = readJsonBool(params.get('slim_presence'));
  const invalid = (status !== 'active' && status !== 'idle') || pingOnly === null || newUserInput === null;

  const raw = new Map<string, string>();
  for (const name of ['status', 'ping_only', 'new_user_input', 'slim_presence']) {
    const v = params.get(name);
    if (v !== undefined) raw.set(name, v);
  }
  return {
    pingOnly: pingOnly === true,
    slimPresence: slim === true,
    lastUpdateId,
    lastUpdateIdText: params.get('last_update_id')?.trim(),
    historyLimitDays,
    invalidBefore30: invalid,
    invalidFrom30: invalid || slim === null,
    ignored: [...params.names()].filter((n) => !PRESENCE_PARAMS.has(n)).sort(),
    raw,
  };
}

/**
 * True when a parameter the upstream validates has a value it will reject: the request is then
 * forwarded as sent so the upstream words the error itself (E1). 2.1 ignores slim_presence.
 */
export function upstreamWillReject(r: PresenceRequest, featureLevel: number): boolean {
  return featureLevel >= FL.SLIM_PRESENCE ? r.invalidFrom30 : r.invalidBefore30;
}

/** P1: the modern format iff `last_update_id` is given or `slim_presence=true`. */
export function wantsModern(r: PresenceRequest): boolean {
  return r.lastUpdateId !== undefined || r.slimPresence;
}

/**
 * P11: the parameters the shim ignored, as the answer says them. The upstream's own list (it
 * knows fewer parameters) is replaced by the shim's, which knows every one; none: no member.
 */
export function withIgnored(body: Record<string, unknown>, ignored: readonly string[]): Record<string, unknown> {
  const { ignored_parameters_unsupported: _dropped, ...rest } = body;
  return ignored.length ? { ...rest, ignored_parameters_unsupported: ignored } : rest;
}

/** P11 for an answer written as bytes: the member (with its leading comma), or nothing. */
export const ignoredMember = (ignored: readonly string[]): string =>
  ignored.length ? `,"ignored_parameters_unsupported":${JSON.stringify(ignored)}` : '';
