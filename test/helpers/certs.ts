import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/** PEM files made with openssl for one test: a CA, a server cert it signs, a client cert it signs, and an unrelated CA. */
export interface TestPki {
  dir: string;
  ca: string;
  caKey: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  /** A CA that signed nothing here: the "wrong CA" of a misconfigured profile. */
  otherCa: string;
  /** A client pair signed by otherCa: a server trusting only `ca` must reject it. */
  otherClientCert: string;
  otherClientKey: string;
}

function ssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

function makeCa(dir: string, name: string): void {
  ssl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
    '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.pem`,
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'], dir);
}

function makeLeaf(dir: string, name: string, ca: string, ext: string): void {
  ssl(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', `/CN=${name}`,
    '-keyout', `${name}.key`, '-out', `${name}.csr`], dir);
  writeFileSync(path.join(dir, `${name}.ext`), ext);
  ssl(['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.pem`, '-CAkey', `${ca}.key`, '-CAcreateserial',
    '-days', '2', '-out', `${name}.pem`, '-extfile', `${name}.ext`], dir);
}

export function makeTestPki(): TestPki {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-pki-'));
  makeCa(dir, 'ca');
  makeCa(dir, 'other-ca');
  makeLeaf(dir, 'server', 'ca', 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n');
  makeLeaf(dir, 'client', 'ca', 'extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n');
  makeLeaf(dir, 'other-client', 'other-ca', 'extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n');
  const p = (f: string) => path.join(dir, f);
  return {
    dir, ca: p('ca.pem'), caKey: p('ca.key'), serverCert: p('server.pem'), serverKey: p('server.key'),
    clientCert: p('client.pem'), clientKey: p('client.key'), otherCa: p('other-ca.pem'),
    otherClientCert: p('other-client.pem'), otherClientKey: p('other-client.key'),
  };
}
