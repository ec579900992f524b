import http from 'node:http';
const [dir, port, upstream] = process.argv.slice(2);
const { createPassThrough } = await import(`${dir}/src/proxy/passthrough.js`);
const { createLogger } = await import(`${dir}/src/observability/logger.js`);
const { createTransport } = await import(`${dir}/src/upstream/transport.js`);
const transport = createTransport({ target: upstream, timeoutMs: 120_000, maxSockets: 256, insecureTls: false });
const pt = createPassThrough({ target: upstream, transport, insecureTls: false, log: createLogger('warn') });
http.createServer((req, res) => pt.web(req, res, { requestId: 'x', route: 'other' })).listen(Number(port), '127.0.0.1');
process.on('SIGINT', () => process.exit(0));
