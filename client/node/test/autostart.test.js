// autostart.test.js - a broker started by connect() that cannot start says
// why, and connect() reports it at once rather than timing out: a data dir
// already served by a broker on another socket (named, with its pid), a data
// dir that cannot be created, a HOME that is no directory.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { connect, ConnectError } from '../src/index.js';
import { startBroker, tempDir, COORDD } from '../testlib/broker.js';

// Runs fn with the environment changed as vars says (undefined: unset).
async function withEnv(vars, fn) {
  const saved = {};
  for (const k of Object.keys(vars)) saved[k] = process.env[k];
  try {
    for (const [k, v] of Object.entries(vars)) {
      if (v === undefined) delete process.env[k]; else process.env[k] = v;
    }
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k]; else process.env[k] = v;
    }
  }
}

// connect() autostarting on sock: the error it rejects with and how long it took.
async function failedAutostart(sock) {
  const t0 = Date.now();
  const err = await connect({ socket: sock, broker: COORDD, connectTimeout: 20000 }).then(
    (c) => { c.close(); return null; }, (e) => e);
  return { err, ms: Date.now() - t0 };
}

test('autostart against a data dir served by another broker names that broker', async () => {
  const a = await startBroker();
  try {
    const { pid } = await (async () => {
      const c = await connect({ socket: a.socket, autostart: false });
      try { return await c.stats(); } finally { await c.close(); }
    })();
    const sock = path.join(tempDir(), 'run', 'other.sock');
    const { err, ms } = await withEnv({ COORD_DATA_DIR: a.dataDir }, () => failedAutostart(sock));
    assert.ok(err instanceof ConnectError, `connected: ${err}`);
    assert.equal(err.code, 'CONNECT');
    assert.ok(err.message.includes(`the broker for ${sock} did not start: data dir ${a.dataDir} ` +
      `is in use by the broker pid ${pid} listening on ${a.socket} ` +
      `(set COORD_SOCKET=${a.socket} to use it)`), err.message);
    assert.ok(ms < 5000, `took ${ms} ms`);
    assert.ok(!fs.existsSync(sock));
    // the first broker still serves
    const c = await connect({ socket: a.socket, autostart: false });
    assert.equal((await c.stats()).pid, pid);
    await c.close();
  } finally {
    await a.stop();
  }
});

test('autostart into a data dir that cannot be created reports the broker\'s reason', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'a-file');
  fs.writeFileSync(file, '');
  const sock = path.join(dir, 'run', 's.sock');
  let r = await withEnv({ COORD_DATA_DIR: path.join(file, 'data') }, () => failedAutostart(sock));
  assert.ok(r.err instanceof ConnectError, `connected: ${r.err}`);
  assert.ok(r.err.message.includes(`did not start: cannot create ${file}/data: Not a directory`),
    r.err.message);
  assert.ok(r.ms < 5000, `took ${r.ms} ms`);
  // the default data dir below a HOME that is a file
  r = await withEnv({ COORD_DATA_DIR: undefined, XDG_STATE_HOME: undefined, HOME: file },
    () => failedAutostart(sock));
  assert.ok(r.err instanceof ConnectError, `connected: ${r.err}`);
  assert.ok(r.err.message.includes(`did not start: cannot create ${file}/.local/state/coord: ` +
    'Not a directory'), r.err.message);
});
