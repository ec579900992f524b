import { describe, expect, it } from 'vitest';
import type { Snapshot } from '../src/presence/snapshots.js';
import { snapshotHub } from './support/budgets.js';

/**
 * SnapshotHub (P9, S2): one upstream fetch per scope in flight, its snapshot serving the rest of
 * its window and never replaced by an older one; a per-caller scope keeps nothing once answered.
 */

const snapshot = (serverTimestamp: number, fetchedAt: number): Snapshot => ({
  serverTimestamp,
  fetchedAt,
  complete: true,
  modern: new Map(),
  merged: undefined,
  bodies: new Map(),
});

describe('SnapshotHub (P9, S2)', () => {
  it('one fetch per scope in flight; the snapshot serves its window, then not', async () => {
    let now = 1_000;
    const hub = snapshotHub(5_000, 10, () => now);
    let calls = 0;
    const p = hub.lead('realm|legacy', async () => {
      calls++;
      return snapshot(1, now);
    });
    expect(hub.pending('realm|legacy')).toBe(p);
    await p;
    expect(calls).toBe(1);
    expect(hub.fresh('realm|legacy')).toBeDefined();
    now += 5_000;
    expect(hub.fresh('realm|legacy')).toBeUndefined();
  });

  it('keeps nothing for a per-caller scope once its fetch is done (memory does not grow with callers)', async () => {
    const hub = snapshotHub(5_000, 10);
    await hub.lead('realm|slim|caller', async () => snapshot(1, Date.now()), false);
    expect(hub.fresh('realm|slim|caller')).toBeUndefined();
    expect(hub.pending('realm|slim|caller')).toBeUndefined();
  });

  it('never keeps an older snapshot over a newer one', async () => {
    const hub = snapshotHub(5_000, 10);
    await hub.lead('s', async () => snapshot(20, Date.now()));
    await hub.lead('s', async () => snapshot(10, Date.now()));
    expect(hub.fresh('s')?.serverTimestamp).toBe(20);
  });

  it('sizes a kept snapshot again once its legacy bytes are read in, within the byte budget (X2)', async () => {
    const hub = snapshotHub(5_000, 10, Date.now, 3 * 1024);
    const a = await hub.lead('a', async () => snapshot(1, Date.now()));
    await hub.lead('b', async () => snapshot(1, Date.now()));
    // Another replica's legacy answer, read after the snapshot was kept (sharing.ts).
    a.legacyBytes = Buffer.alloc(2 * 1024);
    hub.resized('a');
    expect(hub.fresh('a')).toBe(a);
    expect(hub.fresh('b')).toBeUndefined(); // evicted: both no longer fit
  });

  it('with coalesceMs 0 every poll fetches', async () => {
    const hub = snapshotHub(0, 10);
    await hub.lead('s', async () => snapshot(1, Date.now()));
    expect(hub.fresh('s')).toBeUndefined();
    expect(hub.pending('s')).toBeUndefined();
  });
});
