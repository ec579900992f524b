import type { RunningShim } from './shim.js';
import { realmOf } from '../../src/upstream/realm.js';

/** The key a shim keeps a realm's state under for requests with this Host (X12: the realm the upstream names for it). */
export async function realmKeyOf(shim: RunningShim, upstream: string, host: string): Promise<string> {
  const resolved = await shim.shim.context.featureLevels.resolve(realmOf(upstream, { host }));
  if ('refused' in resolved) throw new Error(`the upstream refused ${host}: ${resolved.refused.status}`);
  return resolved.realm.key;
}
