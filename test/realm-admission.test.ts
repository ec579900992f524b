import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { clientAddressOf, TrustedProxies } from '../src/http/forwarded.js';
import { MemoryStore } from '../src/store/memory.js';
import type { Callers } from '../src/upstream/callers.js';
import type { UpstreamClient } from '../src/upstream/client.js';
import { NewRealmsTooFastError, RealmAdmission, shareOf, type AdmittedRealms } from '../src/upstream/realm-admission.js';

/**
 * X12: new realms are taken on at a bounded rate, each once the upstream has accepted a caller
 * of it; a client address has its own share; known ones (in the store) pass without cost.
 */

const at = (t: { now: number }) => () => t.now;
/** A request from `address` (the tests' addressOf reads the peer). */
const from = (address: string, url = '/api/v1/users/me/presence') =>
  ({ url, headers: {}, socket: { remoteAddress: address } }) as unknown as IncomingMessage;
const realm = (name: string) => ({ upstream: 'https://zulip.test', host: name, key: `https://zulip.test|realm:${name}` });
const OLD = 0;

interface Built {
  admission: RealmAdmission;
  /** GET …/users/me calls made, by realm host. */
  asked: string[];
  /** Whether the upstream accepts the callers' credentials (default yes). */
  upstream: { accepts: boolean };
  /** Callers kept from the checks' answers: realm host and user id. */
  remembered: string[];
}

function build(o: { perMinute: number; perAddress?: number; t: { now: number }; store?: AdmittedRealms }): Built {
  const asked: string[] = [];
  const upstream = { accepts: true };
  const client = {
    fetch: async (call: { realm: { host: string } }) => {
      asked.push(call.realm.host);
      return !upstream.accepts
        ? { status: 401, headers: {}, body: Buffer.from('{"result":"error","msg":"Invalid API key","code":"UNAUTHORIZED"}') }
        : { status: 200, headers: {}, body: Buffer.from('{"result":"success","msg":"","user_id":11}') };
    },
  } as unknown as UpstreamClient;
  const remembered: string[] = [];
  const callers = {
    remember: (r: { host: string }, _headers: unknown, me: Record<string, unknown>) => remembered.push(`${r.host} ${me.user_id}`),
  } as unknown as Callers;
  const admission = new RealmAdmission({
    perMinute: o.perMinute,
    perAddressPerMinute: o.perAddress ?? o.perMinute,
    admitted: o.store ?? new MemoryStore({ maxRealms: 1000, maxBytes: 2 ** 20 }),
    addressOf: (req) => req.socket.remoteAddress ?? '',
    client,
    callers,
    maxKnown: 1000,
    now: at(o.t),
  });
  return { admission, asked, upstream, remembered };
}

/** The Retry-After of a refusal, or undefined when the call passed. */
async function retryAfterOf(p: Promise<unknown>): Promise<number | undefined> {
  try {
    await p;
    return undefined;
  } catch (e) {
    expect(e).toBeInstanceOf(NewRealmsTooFastError);
    expect((e as NewRealmsTooFastError).status).toBe(503);
    return (e as NewRealmsTooFastError).retryAfterSeconds;
  }
}

describe('RealmAdmission (X12)', () => {
  it('admits a burst of perMinute new realms, then one per 60/perMinute seconds, with Retry-After until the next', async () => {
    const t = { now: 0 };
    const { admission: a } = build({ perMinute: 6, t });
    for (let i = 0; i < 6; i++) await a.accepted(from('192.0.2.1'), realm(`r${i}`), OLD);
    expect(await retryAfterOf(a.accepted(from('192.0.2.1'), realm('r6'), OLD))).toBe(10);
    t.now = 4_000;
    expect(await retryAfterOf(a.accepted(from('192.0.2.1'), realm('r6'), OLD))).toBe(6);
    t.now = 10_000;
    await a.accepted(from('192.0.2.1'), realm('r6'), OLD);
    expect(await retryAfterOf(a.accepted(from('192.0.2.1'), realm('r7'), OLD))).toBe(10);
    for (let i = 0; i < 7; i++) await a.accepted(from('192.0.2.1'), realm(`r${i}`), OLD); // known: free
  });

  it('takes no token while the upstream refuses the caller, however many realms it names', async () => {
    const t = { now: 0 };
    const store = new MemoryStore({ maxRealms: 1000, maxBytes: 2 ** 20 });
    const { admission: a, asked, upstream } = build({ perMinute: 2, perAddress: 1, t, store });
    upstream.accepts = false;
    for (let i = 0; i < 1_000; i++) {
      const refused = await a.admitCaller(from('192.0.2.66'), realm(`made-up-${i}`), OLD);
      expect(refused?.status).toBe(401);
    }
    expect(asked.length).toBe(1_000);
    expect(await store.isAdmitted(realm('made-up-1').key)).toBe(false);
    // Its buckets untouched, the same address's share too: a caller the upstream accepts is taken on at once.
    upstream.accepts = true;
    expect(await a.admitCaller(from('192.0.2.66'), realm('real'), OLD)).toBeUndefined();
    expect(await store.isAdmitted(realm('real').key)).toBe(true);
  });

  it('asks the upstream once per new realm, never for a known one, and not at all past the rate', async () => {
    const t = { now: 0 };
    const { admission: a, asked, remembered } = build({ perMinute: 1, t });
    expect(await a.admitCaller(from('192.0.2.1', '/json/users/me/presence'), realm('a'), OLD)).toBeUndefined();
    expect(await a.admitCaller(from('192.0.2.1'), realm('a'), OLD)).toBeUndefined();
    expect(await retryAfterOf(a.admitCaller(from('192.0.2.1'), realm('b'), OLD))).toBe(60);
    expect(asked).toEqual(['a']);
    // The caller the check found is kept for the poll's own lookup of it (P15).
    expect(remembered).toEqual(['a 11']);
    // The modern presence API (9.0): the shim keeps no state for the realm, nothing to take.
    expect(await a.admitCaller(from('192.0.2.1'), realm('c'), 263)).toBeUndefined();
    await a.accepted(from('192.0.2.1'), realm('d'), 277);
    expect(asked).toEqual(['a']);
  });

  it('gives each client address its own share: one past it gets the 503 while another address is admitted', async () => {
    const t = { now: 0 };
    const { admission: a } = build({ perMinute: 100, perAddress: 3, t });
    for (let i = 0; i < 3; i++) await a.accepted(from('198.51.100.7'), realm(`flood-${i}`), OLD);
    expect(await retryAfterOf(a.accepted(from('198.51.100.7'), realm('flood-3'), OLD))).toBe(20);
    // An IPv4 address mapped into IPv6 (a dual-stack listener) is the same address.
    expect(await retryAfterOf(a.accepted(from('::ffff:198.51.100.7'), realm('flood-3'), OLD))).toBe(20);
    await a.accepted(from('203.0.113.10'), realm('real'), OLD);
    // IPv6: one /64 is one share.
    for (let i = 0; i < 3; i++) await a.accepted(from(`2001:db8:1:2::${i + 1}`), realm(`v6-${i}`), OLD);
    expect(await retryAfterOf(a.accepted(from('2001:db8:1:2:ffff::9'), realm('v6-3'), OLD))).toBe(20);
    await a.accepted(from('2001:db8:1:3::1'), realm('v6-3'), OLD);
  });

  it('admits without a token a realm the store already knows (a restart, another replica)', async () => {
    const t = { now: 0 };
    const store = new MemoryStore({ maxRealms: 1000, maxBytes: 2 ** 20 });
    const first = build({ perMinute: 1, t, store });
    await first.admission.accepted(from('192.0.2.1'), realm('a'), OLD);
    const second = build({ perMinute: 1, t, store });
    expect(await second.admission.admitCaller(from('192.0.2.1'), realm('a'), OLD)).toBeUndefined();
    expect(second.asked).toEqual([]);
    // Its token is still there for a realm that is new.
    await second.admission.accepted(from('192.0.2.1'), realm('b'), OLD);
  });

  it('takes a realm on again, within the rate, when the store cannot answer', async () => {
    const t = { now: 0 };
    const down = () => Promise.reject(new Error('store down'));
    const { admission: a } = build({ perMinute: 1, t, store: { isAdmitted: down, admit: down } });
    await a.accepted(from('192.0.2.1'), realm('a'), OLD);
    await a.accepted(from('192.0.2.1'), realm('a'), OLD); // known to this process
    expect(await retryAfterOf(a.accepted(from('192.0.2.1'), realm('b'), OLD))).toBe(60);
  });

  it('never admits more than perMinute + elapsed × rate new realms, nor an address more than its share, whatever the arrivals', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 50 }),
        fc.integer({ min: 1, max: 20 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 5_000 }), fc.integer({ min: 0, max: 30 }), fc.integer({ min: 0, max: 3 })), {
          maxLength: 200,
        }),
        async (perMinute, perAddress, arrivals) => {
          const t = { now: 0 };
          const { admission: a } = build({ perMinute, perAddress, t });
          const admitted = new Set<number>();
          const byAddress = new Map<number, number>();
          for (const [gap, r, address] of arrivals) {
            t.now += gap;
            const known = admitted.has(r);
            const refused = await retryAfterOf(a.accepted(from(`192.0.2.${address}`), realm(`r${r}`), OLD));
            if (refused === undefined && !known) {
              admitted.add(r);
              byAddress.set(address, (byAddress.get(address) ?? 0) + 1);
            }
            if (known) expect(refused).toBeUndefined(); // a known realm is never refused
          }
          expect(admitted.size).toBeLessThanOrEqual(perMinute + Math.floor((t.now * perMinute) / 60_000));
          for (const n of byAddress.values()) expect(n).toBeLessThanOrEqual(perAddress + Math.floor((t.now * perAddress) / 60_000));
        },
      ),
    );
  });
});

describe('the client address a new realm counts against (X12)', () => {
  it.each([
    ['198.51.100.7', '198.51.100.7'],
    ['::ffff:198.51.100.7', '198.51.100.7'],
    ['2001:db8:1:2:3:4:5:6', '2001:db8:1:2::/64'],
    ['2001:DB8:0001:0002::7', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['64:ff9b::198.51.100.7', '64:ff9b:0:0::/64'],
    ['', ''],
  ])('%s counts as %s', (address, share) => {
    expect(shareOf(address)).toBe(share);
  });

  const req = (peer: string, xff?: string) =>
    ({ socket: { remoteAddress: peer } as Socket, headers: xff === undefined ? {} : { 'x-forwarded-for': xff } }) as IncomingMessage;
  it.each([
    // [peer, X-Forwarded-For, trusted, client]
    ['203.0.113.9', '198.51.100.1', [], '203.0.113.9'],
    ['10.0.0.4', '198.51.100.1', ['10.0.0.4'], '198.51.100.1'],
    ['10.0.0.4', '192.0.2.99, 198.51.100.1', ['10.0.0.4'], '198.51.100.1'],
    ['10.0.0.4', '198.51.100.1, 10.0.0.3', ['10.0.0.0/8'], '198.51.100.1'],
    ['10.0.0.4', undefined, ['10.0.0.4'], '10.0.0.4'],
    ['10.0.0.4', 'unknown, 10.0.0.3', ['10.0.0.0/8'], '10.0.0.3'],
    ['::ffff:10.0.0.4', '2001:db8::5', ['10.0.0.4'], '2001:db8::5'],
  ] as const)('peer %s with X-Forwarded-For %s, trusting %j: %s', (peer, xff, trusted, client) => {
    expect(clientAddressOf(req(peer, xff), new TrustedProxies(trusted))).toBe(client);
  });
});
