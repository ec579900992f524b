import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

/**
 * Summarises a V8 .cpuprofile (from `node --cpu-prof`, or `npm run bench -- --profile DIR`):
 * self time by function and by module, and total (inclusive) time of the project's own
 * functions. Usage: node --import tsx bench/profile-summary.ts FILE.cpuprofile [top]
 */

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileLine {
  name: string;
  ms: number;
  pct: number;
}

export interface ProfileSummary {
  totalMs: number;
  /** Time with the thread idle (waiting for I/O). */
  idleMs: number;
  selfByFunction: ProfileLine[];
  selfByModule: ProfileLine[];
  /** Inclusive time of functions in src/ (the shim's own code and what it calls). */
  inclusiveOwn: ProfileLine[];
}

function moduleOf(url: string): string {
  if (!url) return '(native / V8)';
  if (url.startsWith('node:')) return url.replace(/^node:internal\//, 'node:');
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return nm[1]!;
  const src = /\/((?:src|bench|test)\/.*)$/.exec(url);
  return src ? src[1]! : url;
}

// Modules loaded through tsx report line 0: their names are shown without a line.
const frameName = (f: CallFrame) =>
  `${f.functionName || '(anonymous)'} ${moduleOf(f.url)}${f.lineNumber > 0 ? `:${f.lineNumber + 1}` : ''}`;

export function summariseProfile(file: string, top = 20): ProfileSummary {
  const p = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++) {
    const dt = (p.timeDeltas[i + 1] ?? 0) / 1000;
    self.set(p.samples[i]!, (self.get(p.samples[i]!) ?? 0) + dt);
  }
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  let idle = 0;
  const fn = new Map<string, number>();
  const mod = new Map<string, number>();
  const inclusive = new Map<string, number>();
  for (const [id, ms] of self) {
    const n = byId.get(id)!;
    if (n.callFrame.functionName === '(idle)') {
      idle += ms;
      continue;
    }
    const name = frameName(n.callFrame);
    fn.set(name, (fn.get(name) ?? 0) + ms);
    const m = moduleOf(n.callFrame.url);
    mod.set(m, (mod.get(m) ?? 0) + ms);
    // Inclusive time of own functions: each once per sample stack.
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const f = byId.get(cur)!.callFrame;
      if (!/\/src\//.test(f.url)) continue;
      const k = frameName(f);
      if (seen.has(k)) continue;
      seen.add(k);
      inclusive.set(k, (inclusive.get(k) ?? 0) + ms);
    }
  }
  const busy = total - idle;
  const lines = (m: Map<string, number>) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, ms]) => ({ name, ms: Math.round(ms * 10) / 10, pct: Math.round((ms / busy) * 1000) / 10 }));
  return { totalMs: total, idleMs: idle, selfByFunction: lines(fn), selfByModule: lines(mod), inclusiveOwn: lines(inclusive) };
}

export function formatProfile(s: ProfileSummary): string {
  const out = [`busy ${Math.round(s.totalMs - s.idleMs)} ms of ${Math.round(s.totalMs)} ms sampled (percentages of busy time)`];
  const block = (title: string, lines: ProfileLine[]) => {
    out.push(title);
    for (const l of lines) out.push(`  ${String(l.pct).padStart(5)}%  ${String(l.ms).padStart(8)} ms  ${l.name}`);
  };
  block('self time by module:', s.selfByModule);
  block('self time by function:', s.selfByFunction);
  block('inclusive time of src/ functions:', s.inclusiveOwn);
  return out.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [file, top] = process.argv.slice(2);
  if (!file) {
    process.stderr.write('usage: node --import tsx bench/profile-summary.ts FILE.cpuprofile [top]\n');
    process.exit(2);
  }
  process.stdout.write(`${formatProfile(summariseProfile(file, Number(top ?? 20)))}\n`);
}
