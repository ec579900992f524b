import { readFileSync } from 'node:fs';
import { BlockList } from 'node:net';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * What the compose files of deploy/ must agree on, read from their text (no Docker here): the
 * replicas trust exactly the load balancer's fixed address, which lies in the network's subnet
 * and outside the range other containers get theirs from; the single-shim file names its TLS
 * terminator in TRUST_PROXY and records into a volume on the image's writable /data.
 */

const ROOT = resolve(import.meta.dirname, '..');
const read = (path: string) => readFileSync(resolve(ROOT, path), 'utf8');
/** Compose's `${NAME:-default}`. */
const variable = (name: string, fallback: string) => `$\{${name}:-${fallback}}`;

/** The default of `${NAME:-default}` after `key: `. */
function defaultOf(text: string, key: string, variable: string): string {
  const m = new RegExp(`^\\s*${key}: \\$\\{${variable}:-([^}]*)\\}\\s*$`, 'm').exec(text);
  expect(m, `${key}: \${${variable}:-…}`).not.toBeNull();
  return m?.[1] ?? '';
}

function within(address: string, cidr: string): boolean {
  const [net = '', prefix = ''] = cidr.split('/');
  const list = new BlockList();
  list.addSubnet(net, Number(prefix), 'ipv4');
  return list.check(address, 'ipv4');
}

describe.each(['deploy/docker-compose.replicas.yml', 'deploy/docker-compose.sentinel.yml'])('%s', (file) => {
  const text = read(file);

  it("the replicas trust the load balancer's fixed address, and no other container can get it", () => {
    const trusted = defaultOf(text, 'TRUST_PROXY', 'LB_ADDRESS');
    const lb = defaultOf(text, 'ipv4_address', 'LB_ADDRESS');
    const subnet = defaultOf(text, '- subnet', 'SHIM_SUBNET');
    const range = defaultOf(text, 'ip_range', 'SHIM_IP_RANGE');
    expect(trusted).toBe(lb);
    expect(within(lb, subnet)).toBe(true);
    expect(within(lb, range)).toBe(false);
    expect(within(range.split('/')[0] ?? '', subnet)).toBe(true);
  });

  it('the load balancer publishes its TLS listener and mounts its certificates and config', () => {
    expect(text).toContain(`"${variable('SHIM_HTTPS_PORT', '443')}:8443"`);
    expect(text).toContain(`"${variable('SHIM_HTTP_PORT', '80')}:8080"`);
    expect(text).toContain(`- ${variable('LB_CERTS_DIR', './certs')}:/etc/nginx/certs:ro`);
    expect(text).toContain('- ./nginx-lb.conf:/etc/nginx/conf.d/default.conf:ro');
    // The healthcheck asks the plain listener's own path, which does not redirect.
    expect(text).toContain('http://127.0.0.1:8080/lb-healthz');
    const lb = read('deploy/nginx-lb.conf');
    expect(lb).toContain('listen 8443 ssl;');
    expect(lb).toContain('ssl_certificate     /etc/nginx/certs/tls.crt;');
    expect(lb).toContain('ssl_certificate_key /etc/nginx/certs/tls.key;');
  });
});

describe('deploy/docker-compose.yml', () => {
  const text = read('deploy/docker-compose.yml');

  it('takes the TLS terminator to trust from TRUST_PROXY', () => {
    expect(defaultOf(text, 'TRUST_PROXY', 'TRUST_PROXY')).toBe('');
  });

  it('publishes the plain-HTTP port on loopback unless SHIM_BIND says otherwise', () => {
    expect(text).toMatch(/^ {6}- "\$\{SHIM_BIND:-127\.0\.0\.1\}:\$\{SHIM_PORT:-9991\}:9991"$/m);
    expect(text).not.toMatch(/^ {6}- "\$\{SHIM_PORT:-9991\}:9991"$/m);
  });

  it("publishes the push relay's port on the host's loopback only, the relay off unless PUSH_RELAY_LISTEN is given (M7)", () => {
    expect(defaultOf(text, 'PUSH_RELAY_LISTEN', 'PUSH_RELAY_LISTEN')).toBe('');
    expect(defaultOf(text, 'PUSH_BOUNCER_URL', 'PUSH_BOUNCER_URL')).toBe('https://push.zulipchat.com');
    expect(text).toContain(`- "127.0.0.1:${variable('PUSH_RELAY_PORT', '9995')}:9995"`);
    expect(text).toContain('PUSH_RELAY_LISTEN=0.0.0.0:9995');
  });

  it("records into a named volume on /data, the image's writable directory", () => {
    expect(defaultOf(text, 'RECORD_HAR', 'RECORD_HAR')).toBe('');
    expect(text).toMatch(/^ {6}- recordings:\/data$/m);
    expect(text).toMatch(/^volumes:\n {2}recordings:$/m);
    expect(text).toMatch(/^ {4}read_only: true$/m);
    expect(read('Dockerfile')).toMatch(/mkdir -p \/data && chown node:node \/data/);
  });
});

/**
 * Every shim service of the compose files: no capability, none to gain, and the memory limit
 * docs/deployment.md sizes a shim with the default budgets at (a flood filling them: 360–367 MiB RSS;
 * "a container of at least 1 GiB").
 */
describe.each(['deploy/docker-compose.yml', 'deploy/docker-compose.replicas.yml', 'deploy/docker-compose.sentinel.yml'])(
  '%s: the shim hardened and sized',
  (file) => {
    const text = read(file);
    const indent = file.endsWith('docker-compose.yml') && !file.includes('.replicas') && !file.includes('.sentinel') ? '    ' : '  ';

    it('drops every capability and gains none', () => {
      expect(text).toContain(`\n${indent}cap_drop: [ALL]\n`);
      expect(text).toContain(`\n${indent}security_opt:\n${indent}  - no-new-privileges:true\n`);
      expect(text).toContain(`\n${indent}read_only: true\n`);
    });

    it('limits memory to what the docs size a shim at', () => {
      const limit = new RegExp(`\\n${indent}mem_limit: (\\d+)g\\n`).exec(text);
      expect(limit).not.toBeNull();
      const gib = Number(limit?.[1]);
      const docs = read('docs/deployment.md');
      expect(docs).toMatch(new RegExp(`a container of at\\s+least ${gib} GiB`));
      // Above the largest RSS the docs measured for the default budgets.
      const measured = /flood filled the budgets: (?:\d+–)?(\d+) MiB RSS/.exec(docs);
      expect(Number(measured?.[1])).toBeLessThan(gib * 1024);
    });
  },
);
