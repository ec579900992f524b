import { parseArgs } from 'node:util';
import { measureB4 } from './b4.js';
import { useBuiltChildren } from './children.js';

/**
 * B4 on its own, as `npm run bench` measures it (bench/b4.ts):
 *
 *   node --import tsx bench/passthrough.ts [--seconds 10] [--rounds 3] [--connections 50]
 *        [--profile DIR] [--before DIR] [--no-variants]
 */

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '50' },
    profile: { type: 'string' },
    before: { type: 'string' },
    'no-variants': { type: 'boolean', default: false },
  },
});

await useBuiltChildren();
const result = await measureB4({
  seconds: Number(values.seconds),
  rounds: Number(values.rounds),
  connections: Number(values.connections),
  variants: !values['no-variants'],
  profileDir: values.profile,
  before: values.before,
  nginx: true,
  allowInstall: true,
  log: (s) => process.stderr.write(`${s}\n`),
});
process.stdout.write(`${result.text}\n`);
