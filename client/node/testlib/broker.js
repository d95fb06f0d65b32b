// testlib/broker.js - test helpers: a real coordd in a temp dir, the paths of
// the built coordd and coordctl.
//
// coordd: $COORD_BROKER, else ../../build/broker/coordd from the package;
// coordctl: $COORD_CTL, else ../../build/tools/coordctl.  Each broker gets its
// own socket and data dir and is awaited through --ready-fd 3 ("ready\n").
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export { PKG } from './paths.js';
import { PKG } from './paths.js';
export const COORDD = process.env.COORD_BROKER || path.resolve(PKG, '../../build/broker/coordd');
export const COORDCTL = process.env.COORD_CTL || path.resolve(PKG, '../../build/tools/coordctl');

for (const [what, p] of [['coordd', COORDD], ['coordctl', COORDCTL]]) {
  if (!fs.existsSync(p))
    throw new Error(`${what} not found at ${p}: build the tree (meson setup build && ninja -C build) or set ${what === 'coordd' ? 'COORD_BROKER' : 'COORD_CTL'}`);
}

/** A fresh temp dir (0700). */
export function tempDir(tag = 'coord-node-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), tag));
}

/** Starts coordd; resolves {socket, dir, dataDir, proc, stop(), kill()}. */
export async function startBroker({ dir = tempDir(), args = [] } = {}) {
  const socket = path.join(dir, 's.sock');
  const dataDir = path.join(dir, 'data');
  const proc = spawn(COORDD, ['--foreground', '--socket', socket, '--data-dir', dataDir, '--ready-fd', '3', ...args],
    { stdio: ['ignore', 'ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((r) => proc.once('exit', (code, sig) => r({ code, sig })));
  await new Promise((resolve, reject) => {
    let got = '';
    proc.stdio[3].on('data', (d) => {
      got += d;
      if (got.includes('ready\n')) resolve();
    });
    proc.stdio[3].once('close', () => reject(new Error(`coordd did not get ready: ${stderr}`)));
    proc.once('error', reject);
  });
  proc.stdio[3].destroy();
  return {
    socket, dir, dataDir, proc, exited,
    get stderr() { return stderr; },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      return exited;
    },
    async kill() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      return exited;
    },
  };
}

/** Runs a process to its end; resolves {code, signal, stdout, stderr}. */
export function run(cmd, args, opts = {}) {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
    let stdout = '', stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    p.once('error', reject);
    p.once('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

/** A promise and its resolve/reject. */
export function deferred() {
  let resolve, reject;
  const promise = new Promise((a, b) => { resolve = a; reject = b; });
  return { promise, resolve, reject };
}
