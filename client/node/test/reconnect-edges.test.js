// The edges of a client with reconnect: true while its broker is gone.
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

// A client whose broker was killed: it is reconnecting (the broker stays down).
async function reconnectingClient() {
  const b = await startBroker();
  const c = await connect({ socket: b.socket, reconnect: true, autostart: false, connectTimeout: 100 });
  const dropped = deferred();
  c.addEventListener('disconnect', () => dropped.resolve(), { once: true });
  await b.kill();
  await dropped.promise;
  return { b, c };
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
