// client.BroadcastChannel: browser semantics across connections and within one.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, CoordError } from '../src/index.js';
import { startBroker, deferred } from '../testlib/broker.js';

let broker, a, b, other;
before(async () => {
  broker = await startBroker();
  a = await connect({ socket: broker.socket });
  b = await connect({ socket: broker.socket });
  other = await connect({ socket: broker.socket, scope: 'elsewhere' });
});
after(async () => {
  await Promise.all([a.close(), b.close(), other.close()]);
  await broker.stop();
});

// Collects the next n messages of ch.
function collect(ch, n) {
  const d = deferred();
  const got = [];
  ch.addEventListener('message', (e) => { got.push(e.data); if (got.length === n) d.resolve(got); });
  return d.promise;
}

test('a message reaches every other object of the name, never the sender', async () => {
  const sender = new a.BroadcastChannel('news');
  const sameClient = new a.BroadcastChannel('news');
  const otherClient = new b.BroadcastChannel('news');
  const otherName = new b.BroadcastChannel('sports');
  const otherScope = new other.BroadcastChannel('news');
  await Promise.all([sender, sameClient, otherClient, otherName, otherScope].map((c) => c.ready));
  const notMe = [];
  sender.onmessage = (e) => notMe.push(e.data);
  otherName.onmessage = (e) => notMe.push(e.data);
  otherScope.onmessage = (e) => notMe.push(e.data);
  const local = collect(sameClient, 2);
  const remote = collect(otherClient, 2);
  const value = { n: 1, s: 'é\u{1F600}', bytes: new Uint8Array([1, 2, 3]), list: [null, true, 2.5] };
  sender.postMessage(value);
  sender.postMessage('second');
  const [l, r] = await Promise.all([local, remote]);
  assert.deepEqual(l[0], value);
  assert.deepEqual(r[0], value);
  assert.deepEqual([l[1], r[1]], ['second', 'second']);
  assert.notEqual(l[0], r[0], 'each receiver decodes its own copy');
  // a round trip through the broker: anything wrongly delivered is in by now
  const sync = collect(sender, 1);
  otherClient.postMessage('sync');
  await sync;
  assert.deepEqual(notMe, ['sync']);
  for (const c of [sender, sameClient, otherClient, otherName, otherScope]) c.close();
});

test('MessageEvent, addEventListener and onmessage; close stops delivery', async () => {
  const x = new a.BroadcastChannel('ev');
  const y = new b.BroadcastChannel('ev');
  await Promise.all([x.ready, y.ready]);
  assert.equal(y.name, 'ev');
  const d = deferred();
  y.onmessage = (e) => d.resolve(e);
  x.postMessage(42);
  const e = await d.promise;
  assert.ok(e instanceof MessageEvent);
  assert.equal(e.type, 'message');
  assert.equal(e.data, 42);
  assert.equal(typeof y.onmessage, 'function');
  y.onmessage = null;
  const z = new b.BroadcastChannel('ev');
  await z.ready;
  const zGot = collect(z, 1);
  let yGot = 0;
  y.addEventListener('message', () => { yGot++; });
  y.close();
  x.postMessage('after close');
  assert.equal(await zGot.then((m) => m[0]), 'after close');
  assert.equal(yGot, 0);
  assert.throws(() => y.postMessage(1), (err) => err instanceof DOMException && err.name === 'InvalidStateError');
  assert.throws(() => x.postMessage(), TypeError);
  assert.throws(() => new a.BroadcastChannel(), TypeError);
  assert.throws(() => x.postMessage('x'.repeat(70000)), (err) => err instanceof CoordError && err.code === 'TOO_LARGE');
  assert.throws(() => x.postMessage(() => {}), (err) => err.name === 'DataCloneError');
  x.close();
  z.close();
});

test('lone-surrogate channel names are their own channel', async () => {
  const x = new a.BroadcastChannel('\uD800');
  const y = new b.BroadcastChannel('\uD800');
  const w = new b.BroadcastChannel('\uFFFD');
  await Promise.all([x.ready, y.ready, w.ready]);
  let wrong = 0;
  w.onmessage = () => { wrong++; };
  const got = collect(y, 1);
  x.postMessage('s');
  assert.deepEqual(await got, ['s']);
  const sync = collect(w, 1);
  new a.BroadcastChannel('\uFFFD').postMessage('fffd');
  await sync;
  assert.equal(wrong, 1);
  for (const c of [x, y, w]) c.close();
});
