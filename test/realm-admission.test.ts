import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { NewRealmsTooFastError, RealmAdmission } from '../src/upstream/realm-admission.js';

/** X12: new realms are admitted at a bounded rate; known ones pass without cost. */
describe('RealmAdmission (X12)', () => {
  const at = (t: { now: number }) => () => t.now;

  it('admits a burst of perMinute new realms, then one per 60/perMinute seconds, with Retry-After until the next', () => {
    const t = { now: 0 };
    const a = new RealmAdmission({ perMinute: 6, maxKnown: 100, now: at(t) });
    for (let i = 0; i < 6; i++) a.admit(`r${i}`);
    expect(() => a.admit('r6')).toThrow(NewRealmsTooFastError);
    try {
      a.admit('r6');
    } catch (e) {
      expect((e as NewRealmsTooFastError).retryAfterSeconds).toBe(10);
      expect((e as NewRealmsTooFastError).status).toBe(503);
    }
    t.now = 4_000;
    try {
      a.admit('r6');
    } catch (e) {
      expect((e as NewRealmsTooFastError).retryAfterSeconds).toBe(6);
    }
    t.now = 10_000;
    a.admit('r6');
    expect(() => a.admit('r7')).toThrow(NewRealmsTooFastError);
    for (let i = 0; i < 7; i++) a.admit(`r${i}`); // known: free
  });

  it('a forgotten realm (beyond maxKnown) is new again', () => {
    const t = { now: 0 };
    const a = new RealmAdmission({ perMinute: 3, maxKnown: 2, now: at(t) });
    a.admit('a');
    a.admit('b');
    a.admit('c'); // forgets a
    expect(() => a.admit('a')).toThrow(NewRealmsTooFastError);
  });

  it('never admits more than perMinute + elapsed × rate new realms, whatever the arrivals', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 50 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 5_000 }), fc.integer({ min: 0, max: 30 })), { maxLength: 200 }),
        (perMinute, arrivals) => {
          const t = { now: 0 };
          const a = new RealmAdmission({ perMinute, maxKnown: 1_000, now: at(t) });
          const admitted = new Set<number>();
          for (const [gap, realm] of arrivals) {
            t.now += gap;
            try {
              a.admit(`r${realm}`);
              admitted.add(realm);
            } catch (e) {
              expect(e).toBeInstanceOf(NewRealmsTooFastError);
              expect(admitted.has(realm)).toBe(false); // a known realm is never refused
            }
          }
          expect(admitted.size).toBeLessThanOrEqual(perMinute + Math.floor((t.now * perMinute) / 60_000));
        },
      ),
    );
  });
});
