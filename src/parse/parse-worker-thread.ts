import { parentPort } from 'node:worker_threads';
import type { PresenceEra } from '../presence/convert.js';
import { readPresenceAnswer, type PresenceColumns } from '../presence/columns.js';
import { BadAnswer, readUserList, userColumnsFromRows, type EmailTable } from '../upstream/large-answers.js';

/** The worker side of parse-worker.ts: one task at a time, results back with their buffers moved. */

export type Task =
  | { id: number; kind: 'users'; bytes: Uint8Array }
  | { id: number; kind: 'rows'; rows: string }
  | { id: number; kind: 'presence'; bytes: Uint8Array; era: PresenceEra | undefined; table?: EmailTable | undefined };

/** A presence answer read: its columns, and its bytes handed back. */
export interface PresenceRead {
  columns: PresenceColumns;
  bytes: Uint8Array;
}

export type Reply = { id: number; ok: true; result: unknown } | { id: number; ok: false; message: string; bad: boolean };

parentPort?.on('message', (task: Task) => {
  try {
    if (task.kind === 'presence') {
      const r = readPresenceAnswer(task.bytes, task.era, task.table);
      // The answer's bytes go back as they came (moved, not copied): the caller keeps them.
      const moved = [r.active.buffer, r.idle.buffer, task.bytes.buffer];
      if (r.ids) moved.push(r.ids.buffer);
      const result: PresenceRead = { columns: r, bytes: task.bytes };
      parentPort!.postMessage({ id: task.id, ok: true, result } satisfies Reply, moved as ArrayBuffer[]);
      return;
    }
    const c = task.kind === 'users' ? readUserList(task.bytes) : userColumnsFromRows(task.rows);
    parentPort!.postMessage({ id: task.id, ok: true, result: c } satisfies Reply, [
      c.ids.buffer as ArrayBuffer,
      c.joined.buffer as ArrayBuffer,
      c.active.buffer as ArrayBuffer,
      c.rowStarts.buffer as ArrayBuffer,
    ]);
  } catch (e) {
    parentPort!.postMessage({ id: task.id, ok: false, message: (e as Error).message, bad: e instanceof BadAnswer } satisfies Reply);
  }
});
