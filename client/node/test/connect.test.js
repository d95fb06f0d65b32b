// connect(): socket resolution, autostart, close(), connection loss and
// reconnect after a broker restart.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { getEventListeners } from 'node:events';
import { connect, defaultSocketPath, ClosedError, ConnectError, CoordError } from '../src/index.js';
import { startBroker, tempDir, deferred, COORDD } from '../testlib/broker.js';

test('default socket path: COORD_SOCKET, XDG_RUNTIME_DIR, /tmp/coord-UID', () => {
  const saved = { s: process.env.COORD_SOCKET, x: process.env.XDG_RUNTIME_DIR };
  try {
    process.env.COORD_SOCKET = '/some/where.sock';
    process.env.XDG_RUNTIME_DIR = '/run/user/7';
    assert.equal(defaultSocketPath(), '/some/where.sock');
    process.env.COORD_SOCKET = '';
    assert.equal(defaultSocketPath(), '/run/user/7/coord/broker.sock');
    delete process.env.COORD_SOCKET;
    delete process.env.XDG_RUNTIME_DIR;
    assert.equal(defaultSocketPath(), `/tmp/coord-${process.getuid()}/broker.sock`);
  } finally {
    for (const [k, v] of [['COORD_SOCKET', saved.s], ['XDG_RUNTIME_DIR', saved.x]]) {
      if (v === undefined) delete process.env[k]; else process.env[k] = v;
    }
  }
});

test('COORD_SOCKET is used when no socket option is given', async () => {
  const b = await startBroker();
  const saved = process.env.COORD_SOCKET;
  process.env.COORD_SOCKET = b.socket;
  try {
    const c = await connect({ autostart: false, client: 'env' });
    assert.equal(c.info.broker.startsWith('coord'), true);
    assert.ok(c.info.epoch >= 1);
    await c.close();
  } finally {
    if (saved === undefined) delete process.env.COORD_SOCKET; else process.env.COORD_SOCKET = saved;
    await b.stop();
  }
});

test('autostart: false with nobody listening is a ConnectError', async () => {
  const dir = tempDir();
  await assert.rejects(connect({ socket: path.join(dir, 'none.sock'), autostart: false }),
    (e) => e instanceof ConnectError && e.code === 'CONNECT' && /no broker/.test(e.message));
});

test('autostart: starts coordd (option broker, env COORD_BROKER) detached', async () => {
  const dir = tempDir();
  const saved = { b: process.env.COORD_BROKER, d: process.env.COORD_DATA_DIR };
  process.env.COORD_DATA_DIR = path.join(dir, 'data');       // the started broker's data dir
  try {
    const sock = path.join(dir, 'run', 'auto.sock');           // its directory is created 0700
    process.env.COORD_BROKER = COORDD;
    const c = await connect({ socket: sock, idleExit: 1 });
    assert.equal((fs.statSync(path.dirname(sock)).mode & 0o777), 0o700);
    const { pid } = await c.stats();
    assert.ok(pid > 0 && pid !== process.pid);
    // a second client finds it running (no second broker)
    const c2 = await connect({ socket: sock, broker: '/nonexistent/coordd' });
    assert.equal((await c2.stats()).pid, pid);
    await c.close();
    await c2.close();
    process.kill(pid, 'SIGTERM');
    delete process.env.COORD_BROKER;
    await assert.rejects(connect({ socket: path.join(dir, 'other.sock'), broker: 'no-such-coordd-binary' }),
      (e) => e instanceof ConnectError && /not found in PATH/.test(e.message));
  } finally {
    for (const [k, v] of [['COORD_BROKER', saved.b], ['COORD_DATA_DIR', saved.d]]) {
      if (v === undefined) delete process.env[k]; else process.env[k] = v;
    }
  }
});

test('a socket directory writable by others is refused', async () => {
  const dir = tempDir();
  fs.chmodSync(dir, 0o777);
  await assert.rejects(connect({ socket: path.join(dir, 's.sock'), autostart: false }),
    (e) => e instanceof ConnectError && /writable by group or others/.test(e.message));
});

test('connect signal: aborted before, and closing the client after', async () => {
  const b = await startBroker();
  const ac = new AbortController();
  ac.abort(new Error('no'));
  await assert.rejects(connect({ socket: b.socket, signal: ac.signal }), { message: 'no' });
  const ac2 = new AbortController();
  const c = await connect({ socket: b.socket, signal: ac2.signal });
  await c.ping();
  ac2.abort();
  await assert.rejects(c.ping(), ClosedError);
  assert.equal(c.closed, true);
  await b.stop();
});

test('connect signal: a closed client lets go of it (a long-lived signal shared by many connects)', async () => {
  const b = await startBroker();
  const ac = new AbortController();
  for (let i = 0; i < 3; i++) {
    const c = await connect({ socket: b.socket, signal: ac.signal });
    await c.close();
  }
  assert.equal(getEventListeners(ac.signal, 'abort').length, 0, 'listeners left on the signal by closed clients');
  const c = await connect({ socket: b.socket, signal: ac.signal });
  assert.equal(getEventListeners(ac.signal, 'abort').length, 1);
  ac.abort();
  assert.equal(c.closed, true);
  await b.stop();
});

test('close(): pending calls reject with ClosedError, held locks are lost', async () => {
  const b = await startBroker();
  const c = await connect({ socket: b.socket });
  const other = await connect({ socket: b.socket });
  const got = deferred();
  let lock;
  const held = c.locks.request('x', (l) => { lock = l; got.resolve(); return new Promise(() => {}); });
  await got.promise;
  const heldR = assert.rejects(held, (e) => e instanceof ClosedError && e.code === 'CLOSED');
  const waitingR = assert.rejects(c.locks.request('x', () => {}), ClosedError);
  const owner = await c.flight.join('k');
  assert.equal(owner.role, 'owner');
  await c.close();
  await heldR;
  await waitingR;
  assert.equal(owner.signal.aborted, true);
  assert.equal(lock.signal.aborted, true);
  assert.ok(lock.signal.reason instanceof CoordError);
  await assert.rejects(c.locks.request('y', () => {}), ClosedError);
  await assert.rejects(c.stats(), ClosedError);
  // the broker sees the close: the lock becomes free for others (not
  // ifAvailable: the broker may read the close a moment after close() resolved)
  assert.equal(await other.locks.request('x', { timeout: 10000 }, (l) => !!l), true);
  await other.close();
  await b.stop();
});

test('connection lost: everything pending rejects; without reconnect the client is closed', async () => {
  const b = await startBroker();
  const c = await connect({ socket: b.socket });
  const disc = deferred();
  c.addEventListener('disconnect', (e) => disc.resolve(e.detail.error));
  const got = deferred();
  let lock;
  const held = c.locks.request('x', (l) => { lock = l; got.resolve(); return new Promise(() => {}); });
  await got.promise;
  const heldR = assert.rejects(held, ClosedError);
  assert.equal((await c.flight.join('k')).role, 'owner');
  // a second join of the same connection waits as a follower
  const followerR = assert.rejects(c.flight.join('k'), ClosedError);
  await c.flight.list();
  await b.kill();
  const err = await disc.promise;
  assert.ok(err instanceof ClosedError);
  await heldR;
  await followerR;
  assert.equal(lock.signal.aborted, true);
  await assert.rejects(c.ping(), ClosedError);
});

test('reconnect: after a broker restart the client works again; tokens keep growing', async () => {
  const b = await startBroker();
  const c = await connect({ socket: b.socket, reconnect: true, autostart: false });
  const t1 = await c.locks.request('r', (l) => l.token);
  const bc = new c.BroadcastChannel('chan');
  await bc.ready;
  const got = deferred();
  let lock;
  const held = assert.rejects(c.locks.request('r', (l) => { lock = l; got.resolve(); return new Promise(() => {}); }), ClosedError);
  await got.promise;
  const leaderGot = deferred();
  let leader;
  const lead = assert.rejects(c.leader('ws', { lease: 5000 }, (L) => { leader = L; leaderGot.resolve(); return new Promise(() => {}); }), ClosedError);
  await leaderGot.promise;
  const reco = deferred();
  c.addEventListener('reconnect', (e) => reco.resolve(e.detail));
  await b.stop();
  await held;
  await lead;
  assert.equal(lock.signal.aborted, true);
  assert.equal(leader.signal.aborted, true);
  assert.equal(leader.state, 'RELEASED');
  // calls made while the broker is down wait for the reconnection
  const during = c.locks.request('r', (l) => l.token);
  const b2 = await startBroker({ dir: b.dir });
  const info = await reco.promise;
  assert.ok(info.epoch > 1);
  const t2 = await during;
  assert.ok(t2 > t1, 'tokens increase across restarts');
  // the channel was subscribed again
  const peer = await connect({ socket: b.socket });
  const msg = deferred();
  bc.onmessage = (e) => msg.resolve(e.data);
  new peer.BroadcastChannel('chan').postMessage('after restart');
  assert.equal(await msg.promise, 'after restart');
  bc.close();
  await peer.close();
  await c.close();
  await b2.stop();
});
