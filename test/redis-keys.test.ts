import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { realmTag, redisKey, type KeyKind } from '../src/store/redis-keys.js';

/** Redis Cluster's slot of a key: CRC16 (XMODEM) of its hash tag, or of the whole key, mod 16384. */
function keySlot(key: string): number {
  let hashed = Buffer.from(key);
  const open = hashed.indexOf('{');
  if (open >= 0) {
    const close = hashed.indexOf('}', open + 1);
    if (close > open + 1) hashed = hashed.subarray(open + 1, close);
  }
  let crc = 0;
  for (const byte of hashed) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

/** Every key the shim names for one realm: ledger, snapshots and locks per scope, lookup caches. */
function keysOfRealm(prefix: string, realm: string, caller: string): string[] {
  return [
    redisKey(prefix, 'presence', realm),
    redisKey(prefix, 'presence-changes', realm),
    redisKey(prefix, 'snap', `${realm}|slim`),
    redisKey(prefix, 'snap-legacy', `${realm}|legacy`, 'Yq3x_0aZ'),
    redisKey(prefix, 'snap-lock', `${realm}|slim`),
    redisKey(prefix, 'snap', `${realm}|legacy|${caller}`),
    redisKey(prefix, 'snap-lock', `${realm}|legacy|${caller}`),
    redisKey(prefix, 'cache', realm, 'user_directory'),
    redisKey(prefix, 'cache', `${realm}|42`, 'own_profile'),
    redisKey(prefix, 'admitted', realm),
  ];
}

const text = fc.string({ unit: fc.constantFrom('a', 'b', '.', ':', '|', '{', '}', '%', 'é') });

describe('Redis key names (one slot per realm on a Cluster)', () => {
  it('computes slots as Redis does (the documented examples)', () => {
    expect(keySlot('somekey')).toBe(11058);
    expect(keySlot('{foo}bar')).toBe(keySlot('foo'));
    expect(keySlot('foo{{bar}}zap')).toBe(keySlot('{bar'));
    expect(keySlot('foo{}{bar}')).not.toBe(keySlot('bar'));
  });

  it('names keys readably, the realm as hash tag', () => {
    const realm = 'https://chat.example.com|chat.example.com';
    expect(redisKey('zcs:', 'presence', realm)).toBe('zcs:{https://chat.example.com|chat.example.com}:presence');
    expect(redisKey('zcs:', 'snap', `${realm}|slim`)).toBe('zcs:{https://chat.example.com|chat.example.com}:snap|slim');
    expect(redisKey('zcs:', 'cache', `${realm}|7`, 'own_profile')).toBe(
      'zcs:{https://chat.example.com|chat.example.com}:cache:own_profile|7',
    );
    expect(realmTag(`${realm}|legacy|caller`)).toBe(realm);
  });

  it('puts every key of a realm in one slot, whatever the prefix, upstream and Host hold', () => {
    fc.assert(
      fc.property(text, text, text, fc.string({ minLength: 1 }), (prefix, upstream, host, caller) => {
        const realm = `${upstream}|${host}`;
        const slots = new Set(keysOfRealm(prefix, realm, caller).map(keySlot));
        expect(slots.size).toBe(1);
      }),
      { numRuns: 2_000 },
    );
  });

  it('gives different realms, kinds and names different keys', () => {
    const kinds: KeyKind[] = ['presence', 'snap', 'snap-lock', 'cache'];
    fc.assert(
      fc.property(text, fc.constantFrom(...kinds), text, fc.constantFrom(...kinds), text, (prefix, k1, n1, k2, n2) => {
        fc.pre(k1 !== k2 || n1 !== n2);
        expect(redisKey(prefix, k1, `u|${n1}`)).not.toBe(redisKey(prefix, k2, `u|${n2}`));
      }),
      { numRuns: 2_000 },
    );
  });

  it('spreads realms over the slots (a tag per realm, not one for all)', () => {
    const slots = new Set(Array.from({ length: 200 }, (_, i) => keySlot(redisKey('zcs:', 'presence', `https://u|r${i}.example.com`))));
    expect(slots.size).toBeGreaterThan(150);
  });
});
