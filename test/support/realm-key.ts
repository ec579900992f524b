import type { RunningShim } from './shim.js';
import { realmOf } from '../../src/upstream/realm.js';

/** The key a shim keeps a realm's state under for requests with this Host (X12: the realm the upstream names for it). */
export async function realmKeyOf(shim: RunningShim, upstream: string, host: string): Promise<string> {
  return (await shim.shim.context.featureLevels.resolve(realmOf(upstream, { host }))).realm.key;
}
