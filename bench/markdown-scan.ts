import { availableParallelism, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { proseRanges, scanSteps } from '../src/changes/markdown-text.js';

/**
 * M6's scan of a message for its prose (src/changes/markdown-text.ts), which the shim runs on
 * every message and edit the app sends: `npm run bench -- markdown-scan [--runs 15]`.
 * 1 MB of each adversarial shape (the earlier scan took 42 s on the first), then 10,000-character
 * messages (Zulip's longest) of ordinary Markdown and of the same shapes. For each: the best and
 * the median of `runs` scans (after warming up; garbage collected between them when node runs
 * with --expose-gc), in wall time and in this process's CPU time (on a shared machine the wall
 * time includes waiting for a core); the work in steps per character, and how the steps grow
 * when the content doubles (2.00: linear). Target: 1 MB in 10 ms or less.
 */

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== 'markdown-scan'),
  options: { runs: { type: 'string' } },
  strict: true,
});
const runs = Number(values.runs ?? 15);

const MB = 1 << 20;
/** As a request body decodes: one flat string (`repeat` builds a rope, slower to read). */
const flat = (s: string) => Buffer.from(s, 'utf16le').toString('utf16le');
const fill = (unit: string) => (size: number) => flat(unit.repeat(Math.ceil(size / unit.length)).slice(0, size));
const decreasing = (n: number) => (size: number) => {
  let cycle = '';
  for (let k = n; k >= 1; k--) cycle += `${'`'.repeat(k)}a`;
  return fill(cycle)(size);
};
const message = [
  'Hi @**channel**, the deploy is at 15:00. See `make deploy` and [the notes](#narrow/channel/5-ops/topic/deploy).',
  '',
  '- stop the `worker` queue',
  '- run:',
  '  ```bash',
  '  ./manage.py migrate --noinput',
  '  ```',
  '1. check `/healthz`',
  '',
  '```quote',
  '@_**Iago|5** [said](#narrow/channel/5-ops/topic/deploy/near/12):',
  '> last time `migrate` took 4 min',
  '```',
  '',
].join('\n');

const SHAPES: Array<[string, (size: number) => string]> = [
  ['backtick runs of 1000 … 1, each after a letter', decreasing(1000)],
  ['backtick runs of 100 … 1', decreasing(100)],
  ['all backticks', fill('`')],
  ['escaped backticks \\`', fill('\\`')],
  ['code spans `a`', fill('`a` ')],
  ['fences opening ```x', fill('```x\n')],
  ['quote blocks opening ```quote, nested', fill('```quote\nx `\n')],
  ['fences opening and closing', fill('```\nx\n```\n')],
  ['lazy lines under 40 `>`', (size) => flat(`${'> '.repeat(40)}x\n${fill('y `\n')(size - 82)}`)],
  ['list items', fill('- a `b\n')],
  ['tabs and CR LF', fill('\ta `b`\r\n')],
  ['ordinary Markdown', fill(`${message}\n`)],
];

const gc = (globalThis as { gc?: () => void }).gc;
/** Best and median wall and CPU milliseconds of `runs` scans. */
function measure(content: string): { wall: [number, number]; cpu: [number, number] } {
  // Warm up the JIT: 20 scans, or 200 ms of them.
  const warmUntil = performance.now() + 200;
  for (let i = 0; i < 20 && performance.now() < warmUntil; i++) proseRanges(content);
  const wall: number[] = [];
  const cpu: number[] = [];
  for (let i = 0; i < runs; i++) {
    gc?.();
    const cpuBefore = process.cpuUsage();
    const started = performance.now();
    proseRanges(content);
    wall.push(performance.now() - started);
    const used = process.cpuUsage(cpuBefore);
    cpu.push((used.user + used.system) / 1000);
  }
  const bestAndMedian = (xs: number[]): [number, number] => {
    xs.sort((a, b) => a - b);
    return [xs[0]!, xs[Math.floor(xs.length / 2)]!];
  };
  return { wall: bestAndMedian(wall), cpu: bestAndMedian(cpu) };
}

console.log(
  `Node ${process.version}, ${availableParallelism()} cores, load average ${loadavg()[0]!.toFixed(2)}, ${runs} runs each${gc ? ', gc between' : ''}`,
);
for (const [size, unit, label] of [
  [MB, 1, '1 MB'],
  [10_000, 1000, '10,000 characters'],
] as const) {
  console.log(`\n${label}:`);
  for (const [name, make] of SHAPES) {
    const content = make(size);
    const { wall, cpu } = measure(content);
    const steps = scanSteps(content);
    const growth = scanSteps(make(2 * size)) / steps;
    const time = ([best, median]: [number, number]) =>
      unit === 1 ? `${best.toFixed(1)} / ${median.toFixed(1)} ms` : `${(best * unit).toFixed(0)} / ${(median * unit).toFixed(0)} µs`;
    console.log(
      `  ${name.padEnd(46)} wall ${time(wall).padStart(17)}, CPU ${time(cpu).padStart(17)} (best / median); ${(steps / content.length).toFixed(2)} steps a character, ×${growth.toFixed(2)} for twice the content`,
    );
  }
}
