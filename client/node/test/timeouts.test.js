// A wait's TIMEOUT said in the caller's terms: "lock not granted: timed
// out after 0.5 s", never the broker's words, which name its request fields
// (timeout_ms, wait_ms).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, TimeoutError } from '../src/index.js';
import { startBroker, deferred } from '../testlib/broker.js';

test('lock, leader and once time out in seconds, not field names', async () => {
  const b = await startBroker();
  const a = await connect({ socket: b.socket });
  const c = await connect({ socket: b.socket });
  const done = deferred();
  const locked = deferred(), leading = deferred(), owning = deferred();
  const holds = [
    a.locks.request('x', () => { locked.resolve(); return done.promise; }),
    a.leader('ws', () => { leading.resolve(); return done.promise; }),
    a.once('k', () => { owning.resolve(); return done.promise; }),
  ];
  await Promise.all([locked.promise, leading.promise, owning.promise]);
  const says = (what) => (e) => {
    assert.ok(e instanceof TimeoutError, String(e));
    assert.equal(e.message, `${what}: timed out after 0.5 s`);
    assert.doesNotMatch(e.message, /timeout_ms|wait_ms|within/);
    return true;
  };
  await assert.rejects(c.locks.request('x', { timeout: 500 }, () => 1), says('lock not granted'));
  await assert.rejects(c.leader('ws', { timeout: 500 }, () => 1), says('not elected'));
  await assert.rejects(c.once('k', () => 2, { wait: 500 }), says('no result'));
  done.resolve('v');
  await Promise.all(holds);
  await a.close();
  await c.close();
  await b.stop();
});
