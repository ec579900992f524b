import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CompactPresences } from '../src/presence/columns.js';
import type { ModernPresence } from '../src/presence/ledger.js';
import { readUserList } from '../src/upstream/large-answers.js';
import { Directory, emailPicks } from '../src/upstream/user-directory.js';

/**
 * X2: per-realm state kept compact (typed columns and open-addressing indexes in place of Maps of
 * objects) answers exactly what the Maps it replaced answered.
 */

describe("a user directory's email index (X2)", () => {
  // Few distinct emails, so duplicates (X10), prefixes of one another and colliding slots are common.
  const email = fc.constantFrom('a@x', 'ab@x', 'a@xy', 'b@x', 'ü@x', '', 'c@x', 'a@x ', 'A@x');
  const member = fc.record({ email, is_active: fc.boolean() });

  it('maps every email as a Map of emails to their picked user would', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(member, { maxLength: 40 }), fc.array(email, { maxLength: 5 }), async (rows, asked) => {
        const members = rows.map((m, i) => ({
          ...m,
          user_id: 100 + i,
          is_bot: false,
          is_admin: false,
          is_guest: false,
          timezone: '',
          date_joined: '',
        }));
        const columns = readUserList(Buffer.from(JSON.stringify({ result: 'success', msg: '', members })));
        const d = await Directory.of(columns, 0);
        // The model: positions by email (columns are ordered by id), the one active member of a shared email (X10).
        const byEmail = new Map<string, number[]>();
        for (const [i, m] of members.entries()) byEmail.set(m.email, [...(byEmail.get(m.email) ?? []), i]);
        for (const e of [...byEmail.keys(), ...asked]) {
          const positions = byEmail.get(e);
          const pick = !positions ? -1 : positions.length === 1 ? positions[0]! : emailPicks(columns, positions);
          expect(d.idOf(e)).toBe(pick < 0 ? undefined : columns.ids[pick]);
        }
        expect(d.ambiguousEmails).toEqual(new Set([...byEmail].filter(([, p]) => p.length > 1).map(([e]) => e)));
      }),
      { numRuns: 300 },
    );
  });
});

describe("a user directory's footprint (X2)", () => {
  const list = (names: string[]) =>
    readUserList(
      Buffer.from(
        JSON.stringify({
          members: names.map((full_name, i) => ({ user_id: i + 1, email: `u${i}@x`, full_name, is_active: true, date_joined: '' })),
        }),
      ),
    );

  it('charges its text at one byte a character unless a character is past U+00FF, as V8 keeps it', async () => {
    const latin = list(['Zoë Müller', 'Ann', 'Bob']);
    const chinese = list(['Zoë Müller', '王芳', 'Bob']);
    expect(latin.oneByte).toBe(true);
    expect(chinese.oneByte).toBe(false);
    const [a, b] = [await Directory.of(latin, 0), await Directory.of(chinese, 0)];
    const text = (c: typeof latin) => c.rows.length + c.emails.length;
    expect(b.bytes - a.bytes).toBe(2 * text(chinese) - text(latin));
  });
});

describe("a snapshot's modern entries, compact (X2)", () => {
  const entry = fc.record({ active_timestamp: fc.integer({ min: 0, max: 2 ** 33 }), idle_timestamp: fc.integer({ min: 0, max: 2 ** 33 }) });

  it('reads, iterates and sizes as the Map it was made from', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), entry), { maxLength: 60 }),
        fc.array(fc.integer(), { maxLength: 8 }),
        async (pairs, asked) => {
          const map = new Map<number, ModernPresence>(pairs);
          const compact = await CompactPresences.of(map);
          expect(compact).toBeInstanceOf(CompactPresences);
          expect(compact.size).toBe(map.size);
          expect([...compact]).toEqual([...map]);
          expect([...compact.keys()]).toEqual([...map.keys()]);
          for (const id of [...map.keys(), ...asked]) {
            expect(compact.get(id)).toEqual(map.get(id));
            expect(compact.has(id)).toBe(map.has(id));
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('keeps a map whose ids are not 32-bit integers as it is', async () => {
    const map = new Map([[2 ** 40, { active_timestamp: 1, idle_timestamp: 2 }]]);
    expect(await CompactPresences.of(map)).toBe(map);
  });

  it('holds a 10,000-user snapshot in under 30 bytes a user', async () => {
    const map = new Map<number, ModernPresence>();
    for (let i = 0; i < 10_000; i++) map.set(10 + i, { active_timestamp: 1_700_000_000 + i, idle_timestamp: 1_700_000_100 + i });
    const compact = (await CompactPresences.of(map)) as CompactPresences;
    expect(compact.byteLength / 10_000).toBeLessThan(30);
  });
});
