// The edges of a client with reconnect: true while its broker is gone: a
// request's signal, close(), and what is left at the broker afterwards.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, ClosedError } from '../src/index.js';
import { startBroker, deferred } from '../testlib/broker.js';

// p's outcome so far: {state: 'pending'} until it settles.
function track(p) {
  const t = { state: 'pending', value: undefined, error: undefined };
  p.then((v) => { t.state = 'resolved'; t.value = v; }, (e) => { t.state = 'rejected'; t.error = e; });
  return t;
}

// One task later: the microtasks of what just happened have all run.
const nextTask = () => new Promise((r) => setImmediate(r));

// A client whose broker was killed: it is reconnecting (the broker stays
// down until restart()).
async function reconnectingClient() {
  const b = await startBroker();
  const c = await connect({ socket: b.socket, reconnect: true, autostart: false, connectTimeout: 100 });
  const dropped = deferred();
  c.addEventListener('disconnect', () => dropped.resolve(), { once: true });
  await b.kill();
  await dropped.promise;
  return {
    b, c,
    async restart() {
      const reco = deferred();
      c.addEventListener('reconnect', () => reco.resolve(), { once: true });
      const b2 = await startBroker({ dir: b.dir });
      await reco.promise;
      return b2;
    },
  };
}

test('a request\'s signal rejects it while the client waits to reconnect: lock, flight join, campaign', async () => {
  const { b, c, restart } = await reconnectingClient();
  let b2 = null;
  try {
    await abortWhileReconnecting(c);
    // once the broker is back, none of them was sent: nothing held, nothing waits
    b2 = await restart();
    assert.deepEqual(await c.locks.query(), { held: [], pending: [] });
    assert.deepEqual(await c.flight.list(), []);
    assert.equal((await c.leaders.info('w')).state, 'idle');
    assert.equal(await c.locks.request('x', { ifAvailable: true }, (l) => l && l.name), 'x');
  } finally {
    await c.close();
    await (b2 ?? b).stop();
  }
});

async function abortWhileReconnecting(c) {
  const calls = {
    lock: (signal) => c.locks.request('x', { signal }, () => 'ran'),
    join: (signal) => c.flight.join('k', { signal }),
    leader: (signal) => c.leader('w', { signal }, () => 'led'),
  };
  for (const [what, call] of Object.entries(calls)) {
    const ac = new AbortController();
    const t = track(call(ac.signal));
    await nextTask();
    assert.equal(t.state, 'pending', `${what}: waits for the broker`);
    ac.abort();
    await nextTask();
    assert.equal(t.state, 'rejected', `${what}: rejects as soon as its signal aborts, broker or not`);
    assert.equal(t.error.name, 'AbortError', what);
  }
}

test('close() while reconnecting: calls waiting for the broker reject by the time close() resolves', async () => {
  const { b, c } = await reconnectingClient();
  const waiting = {
    ping: track(c.ping()),
    lock: track(c.locks.request('x', () => 'ran')),
    join: track(c.flight.join('k')),
    leader: track(c.leader('w', () => 'led')),
  };
  try {
    await nextTask();
    for (const [what, t] of Object.entries(waiting)) assert.equal(t.state, 'pending', what);
    await c.close();
    await nextTask();
    for (const [what, t] of Object.entries(waiting)) {
      assert.equal(t.state, 'rejected', `${what}: settled with close()`);
      assert.ok(t.error instanceof ClosedError, `${what}: ${t.error}`);
    }
  } finally {
    await c.close();
    await b.stop();
  }
});
