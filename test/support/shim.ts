import { Writable } from 'node:stream';
import { configSchema, loadConfig, type Config } from '../../src/config/index.js';
import { createLogger } from '../../src/observability/logger.js';
import { createShim, type Shim, type ShimOptions } from '../../src/server.js';

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? DeepPartial<T[K]> : T[K] };

/** Every log line written by shims started in tests (for the secrets checks). */
export const capturedLogLines: string[] = [];
/** Every shim started in tests (the secrets check reads their /metrics text). */
export const startedShims: Shim[] = [];

export function testConfig(upstream: string, over: DeepPartial<Config> = {}): Config {
  const base = loadConfig(['--upstream', upstream, '--port', '0', '--log-level', 'silent'], {}).config;
  const merged = JSON.parse(JSON.stringify(base)) as Record<string, Record<string, unknown>>;
  for (const [k, v] of Object.entries(over)) merged[k] = { ...merged[k], ...(v as Record<string, unknown>) };
  return configSchema.parse(merged);
}

export interface RunningShim {
  shim: Shim;
  url: string;
  logs: string[];
  close(): Promise<void>;
}

export async function startShim(upstream: string, over: DeepPartial<Config> = {}, extra: Partial<ShimOptions> = {}): Promise<RunningShim> {
  const config = testConfig(upstream, over);
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      const line = String(chunk);
      logs.push(line);
      capturedLogLines.push(line);
      cb();
    },
  });
  const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'debug', sink);
  const shim = createShim({ config, log, target: upstream, upstreamId: upstream, ...extra });
  startedShims.push(shim);
  const { url } = await shim.listen(0, '127.0.0.1');
  return { shim, url, logs, close: () => shim.close() };
}
