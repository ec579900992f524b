import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';

/**
 * An HTTPS front for a plain-HTTP fake upstream, with a self-signed certificate made at test
 * time by openssl: TLS is terminated here and the bytes piped to the fake.
 */

export interface SelfSigned {
  key: Buffer;
  cert: Buffer;
}

/** A fresh self-signed certificate for 127.0.0.1, or the reason it cannot be made here. */
export function selfSignedCertificate(): SelfSigned | { skip: string } {
  const dir = mkdtempSync(join(tmpdir(), 'zcs-tls-'));
  try {
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
        '-days',
        '1',
        '-subj',
        '/CN=127.0.0.1',
        '-addext',
        'subjectAltName=IP:127.0.0.1',
      ],
      { stdio: 'ignore', timeout: 30_000 },
    );
    return { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) };
  } catch (e) {
    // Node's crypto makes key pairs but not X.509 certificates: without openssl, no test.
    return { skip: `openssl could not make a certificate (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})` };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface TlsFront {
  url: string;
  close(): Promise<void>;
}

export async function startTlsFront(target: string, cert: SelfSigned): Promise<TlsFront> {
  const t = new URL(target);
  const sockets = new Set<net.Socket>();
  const server = tls.createServer({ key: cert.key, cert: cert.cert }, (client) => {
    const up = net.connect(Number(t.port), t.hostname);
    sockets.add(client).add(up);
    const done = () => {
      client.destroy();
      up.destroy();
      sockets.delete(client);
      sockets.delete(up);
    };
    client.on('error', done).on('close', done);
    up.on('error', done).on('close', done);
    client.pipe(up).pipe(client);
  });
  // A client that refuses the certificate fails the handshake: expected here.
  server.on('tlsClientError', () => {});
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `https://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
