import { once } from 'node:events';
import http, { type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { configFromObject } from '../src/config/index.js';
import { decide } from '../src/dispatch.js';
import { drain } from '../src/http/drain.js';
import { badRequest } from '../src/http/errors.js';
import { InFlightAnswers } from '../src/http/in-flight.js';
import { ownPaths } from '../src/http/own-paths.js';
import { changedKeys, LiveSettings } from '../src/live-settings.js';
import { closeLogger, createLogger, exitFlushCount } from '../src/observability/logger.js';
import { routeOf } from '../src/routes.js';
import { send } from './support/http-client.js';

/**
 * The composition root's parts, each alone: what SIGHUP may change (X9), the decision of how a
 * request is dealt with, the shim's own paths, and the drain (X9).
 */

const silent = { write() {} };
const configOf = (given: object) => configFromObject({ upstream: { url: 'http://127.0.0.1:1' }, ...given }).config;

describe('live settings (X9)', () => {
  it('apply what a reload may change, keep the rest, and leave the configuration they started from as it was', () => {
    const started = configOf({ server: { realmHosts: ['a.example.com'], uploadsPerAddress: 4 }, presence: { coalesceMs: 50 } });
    const log = createLogger('info', silent);
    const live = new LiveSettings(started, log);
    expect(live.admits('b.example.com')).toBe(false);
    const next = configOf({
      server: { realmHosts: ['b.example.com'], uploadsPerAddress: 2, shutdownGraceMs: 1234, bodyTimeoutMs: 9000 },
      presence: { coalesceMs: 60 },
      log: { level: 'warn', access: 'off' },
    });
    const { applied, kept } = live.reload(next);
    expect(applied).toEqual([
      'log.access',
      'log.level',
      'server.bodyTimeoutMs',
      'server.realmHosts',
      'server.shutdownGraceMs',
      'server.uploadsPerAddress',
    ]);
    expect(kept).toEqual(['presence.coalesceMs']);
    expect([live.admits('b.example.com'), live.admits('a.example.com'), live.readyHost]).toEqual([true, false, 'b.example.com']);
    expect([live.uploads.perAddress, live.shutdownGraceMs, live.bodyLimits().totalMs, live.accessLog, log.level]).toEqual([
      2,
      1234,
      9000,
      false,
      'warn',
    ]);
    expect(started.server.realmHosts).toEqual(['a.example.com']);
    // A setting kept for a restart is said again at the next reload; one applied is not.
    expect(live.reload(next)).toEqual({ applied: [], kept: ['presence.coalesceMs'] });
  });

  it('changedKeys names the dotted keys that differ', () => {
    const a = configOf({});
    expect(changedKeys(a, configOf({ server: { trustProxy: ['10.0.0.1'] } }))).toEqual(['server.trustProxy']);
    expect(changedKeys(a, configOf({}))).toEqual([]);
  });
});

describe('the decision for a request', () => {
  const refused = badRequest('no');
  it.each([
    ['GET', '/healthz', true, undefined, { own: true, passing: false, holding: false }],
    ['GET', '/healthz', false, refused, { own: false, passing: false, holding: false }],
    ['GET', '/api/v1/messages', true, undefined, { own: false, passing: true, holding: true }],
    ['GET', '/api/v1/messages', true, refused, { own: false, passing: false, holding: false }],
    ['GET', '/api/v1/users/me', true, undefined, { own: false, passing: false, holding: false }],
  ])('%s %s (own paths here: %s, gate %o)', (method, path, here, gate, expected) => {
    const decision = decide(routeOf(method, path), here, () => gate);
    expect({ own: decision.own, passing: decision.passing, holding: decision.holding }).toEqual(expected);
    expect(decision.gate).toBe(expected.own ? undefined : gate);
  });
});

async function serving(handler: http.RequestListener): Promise<{ server: http.Server; url: string }> {
  const server = http.createServer(handler);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

describe("the shim's own paths", () => {
  it('/readyz names the first check that fails, in its own words only where they are the shim’s', async () => {
    const failures: unknown[] = [];
    const checks: Array<[string, () => Promise<unknown>]> = [
      ['first', async () => {}],
      ['second', () => Promise.reject(new Error('ECONNREFUSED 10.1.2.3'))],
    ];
    const serve = ownPaths({
      readiness: () => checks,
      explains: () => false,
      registry: { metrics: async () => 'm 1\n', contentType: 'text/plain' },
      failed: (e) => failures.push(e),
    });
    const { server, url } = await serving((req, res) => void serve(req.url as '/readyz', req, res));
    try {
      const ready = await send(url, { method: 'GET', path: '/readyz' }, { timeoutMs: 5_000 });
      expect(ready.status).toBe(503);
      expect(JSON.parse(ready.body.toString())).toEqual({ result: 'error', msg: 'not ready: second', code: 'NOT_READY' });
      expect((await send(url, { method: 'POST', path: '/healthz' }, { timeoutMs: 5_000 })).status).toBe(405);
      expect((await send(url, { method: 'GET', path: '/metrics' }, { timeoutMs: 5_000 })).body.toString()).toBe('m 1\n');
      checks.pop();
      expect((await send(url, { method: 'GET', path: '/readyz' }, { timeoutMs: 5_000 })).status).toBe(200);
      expect(failures).toEqual([]);
    } finally {
      server.close();
    }
  });
});

describe('the drain (X9)', () => {
  it('waits for the answers in flight, then resolves once the listener has closed', async () => {
    const inFlight = new InFlightAnswers();
    let held: (() => void) | undefined;
    const { server, url } = await serving((_req: IncomingMessage, res) => {
      const entry = inFlight.add(res, 'id-1');
      res.on('close', () => entry.remove());
      held = () => res.end('done');
    });
    const answer = send(url, { method: 'GET', path: '/' }, { timeoutMs: 5_000 });
    for (let i = 0; i < 200 && !held; i++) await new Promise((r) => setTimeout(r, 5));
    let drained = false;
    const drainAll = drain({ server, sides: [], inFlight, graceMs: 5_000, handedOver: () => 0, cut: () => {} }).then(() => {
      drained = true;
    });
    await new Promise((r) => setTimeout(r, 50));
    expect(drained).toBe(false);
    held!();
    const got = await answer;
    expect(got.body.toString()).toBe('done');
    expect(got.headers.connection).toBe('close'); // an answer in flight when the drain began closes its connection
    await drainAll;
    expect(server.listening).toBe(false);
  });

  it('at the deadline answers a request still waiting with a 503 and cuts the rest', async () => {
    const inFlight = new InFlightAnswers();
    let cut = 0;
    let waiting = false;
    const { server, url } = await serving((_req, res) => {
      const entry = inFlight.add(res, 'id-2');
      res.on('close', () => entry.remove());
      waiting = true;
    });
    const answer = send(url, { method: 'GET', path: '/' }, { timeoutMs: 5_000 });
    for (let i = 0; i < 200 && !waiting; i++) await new Promise((r) => setTimeout(r, 5));
    const drained = drain({ server, sides: [], inFlight, graceMs: 50, handedOver: () => 0, cut: () => cut++ });
    const got = await answer;
    expect(got.status).toBe(503);
    expect(got.headers['x-request-id']).toBe('id-2');
    await drained;
    expect(cut).toBe(1);
  });
});

describe('a stdout logger closed', () => {
  it('takes its flush at exit with it, once', () => {
    const before = exitFlushCount();
    const loggers = [createLogger('info'), createLogger('info')];
    expect(exitFlushCount()).toBe(before + 2);
    closeLogger(loggers[0]!);
    closeLogger(loggers[0]!);
    expect(exitFlushCount()).toBe(before + 1);
    closeLogger(loggers[1]!);
    closeLogger(createLogger('info', silent)); // not a stdout logger: nothing to take
    expect(exitFlushCount()).toBe(before);
  });
});
