import { writeSync } from 'node:fs';
import { createLogger } from '../../src/observability/logger.js';

/**
 * A process that logs through the shim's stdout logger into a pipe its reader is not reading
 * yet (test/log-output.test.ts): it fills the pipe first, then logs its last lines and exits at
 * once, as the CLI does after SIGTERM. Those lines must still reach the reader. With `drain`,
 * it does not exit but lets its event loop run dry (an embedding application's way to end).
 */
const log = createLogger('info');
// A pipe holds 64 KiB on Linux: this fills it (writeSync waits for room once it is full).
writeSync(1, `${'x'.repeat(64 * 1024 - 1)}\n`);
for (let i = 1; i <= 3; i++) log.info({ n: i }, 'a last line before exit');
if (process.argv[2] !== 'drain') process.exit(0);
