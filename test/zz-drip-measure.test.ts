import { it } from 'vitest';
import { startFake } from './support/fake-zulip.js';
import { send } from './support/http-client.js';
import { startShim } from './support/shim.js';

it('drip at the default config', async () => {
  const fake = await startFake({ era: '2.1' });
  const shim = await startShim(fake.url); // default upstream.timeoutMs
  fake.override = (req, res) => {
    if ((req.url ?? '').split('?')[0] !== '/api/v1/users/me/presence') return false;
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100000' });
    const t = setInterval(() => res.write(' '), 1000);
    res.on('close', () => clearInterval(t));
    return true;
  };
  const t0 = Date.now();
  const a = await send(shim.url, { method: 'POST', path: '/api/v1/users/me/presence', headers: { authorization: fake.auth(10), 'content-type': 'application/x-www-form-urlencoded' }, body: Buffer.from('status=active&last_update_id=-1') }, { timeoutMs: 300_000 });
  process.stderr.write(`DRIP RESULT: status ${a.status} ${a.body.toString()} after ${Date.now() - t0} ms (timeoutMs ${shim.shim.context.config.upstream.timeoutMs})\n`);
  await shim.close();
  await fake.stop();
}, 300_000);
