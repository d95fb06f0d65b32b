// Web Locks behaviour of client.locks, after the spec's request steps and the
// web-platform-tests web-locks suite (acquire, signal, steal, ifAvailable,
// mode-*, query-order, resource-names, held), against a real coordd.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { connect, Lock } from '../src/index.js';
import { startBroker, deferred, PKG } from '../testlib/broker.js';

let broker, c, c2;
let n = 0;
const uniq = (t) => `${t}-${++n}`;
const never = () => new Promise(() => {});

before(async () => {
  broker = await startBroker();
  c = await connect({ socket: broker.socket, autostart: false, client: 'wl-a' });
  c2 = await connect({ socket: broker.socket, autostart: false, client: 'wl-b' });
});
after(async () => {
  await c.close();
  await c2.close();
  await broker.stop();
});

// A request known to be at the broker (granted or queued) when this resolves:
// a later call on the same connection was answered.  Requests of two
// connections reach the broker in no fixed order otherwise.
async function queued(client, ...args) {
  const p = client.locks.request(...args);
  p.catch(() => {});
  await client.locks.query();
  return { p };
}

const rejectsDOM = (p, name) => assert.rejects(p, (e) => e instanceof DOMException && e.name === name);

test('argument validation: TypeError like WebIDL', async () => {
  const L = c.locks;
  const res = uniq('args');
  await assert.rejects(L.request(), TypeError);
  await assert.rejects(L.request(res), TypeError);
  for (const cb of [undefined, null, 123, 'abc', [], {}, new Promise(() => {})])
    await assert.rejects(L.request(res, cb), TypeError);
  await assert.rejects(L.request(res, {}, undefined), TypeError);
  await assert.rejects(L.request(res, { mode: 'foo' }, () => {}), TypeError);
  await assert.rejects(L.request(res, { mode: null }, () => {}), TypeError);
  await assert.rejects(L.request(res, 5, () => {}), TypeError);
  await assert.rejects(L.request(Symbol('x'), () => {}), TypeError);
  for (const signal of ['string', 12.34, false, {}, Symbol(), () => {}, null])
    await assert.rejects(L.request(res, { signal }, () => assert.fail('ran')), TypeError);
  // errors are rejections, never synchronous throws
  const p = L.request();
  assert.ok(p instanceof Promise);
  await p.catch(() => {});
  assert.equal(await L.request(res, { mode: 'exclusive' }, (l) => l.mode), 'exclusive');
  assert.equal(await L.request(res, { mode: 'shared' }, (l) => l.mode), 'shared');
  assert.equal(await L.request(res, null, (l) => l.mode), 'exclusive');
});

test('NotSupportedError: reserved names and option combinations', async () => {
  const L = c.locks;
  const res = uniq('ns');
  for (const name of ['-', '-foo', '-leader/x'])
    await rejectsDOM(L.request(name, () => {}), 'NotSupportedError');
  await rejectsDOM(L.request(res, { steal: true, ifAvailable: true }, () => {}), 'NotSupportedError');
  await rejectsDOM(L.request(res, { mode: 'shared', steal: true }, () => {}), 'NotSupportedError');
  await rejectsDOM(L.request(res, { signal: new AbortController().signal, steal: true }, () => {}), 'NotSupportedError');
  await rejectsDOM(L.request(res, { signal: new AbortController().signal, ifAvailable: true }, () => {}), 'NotSupportedError');
  await rejectsDOM(L.request(res, { timeout: 10, steal: true }, () => {}), 'NotSupportedError');
  let got = false;
  await L.request('x-anything', () => { got = true; });
  assert.ok(got, 'an embedded - is fine');
});

test('names are converted with ToString; the callback gets a Lock', async () => {
  const l = await c.locks.request(12345, (lock) => lock);
  assert.ok(l instanceof Lock);
  assert.equal(l.name, '12345');
  assert.equal(l.mode, 'exclusive');
  assert.equal(Object.prototype.toString.call(l), '[object Lock]');
  assert.ok(Number.isSafeInteger(l.token) && l.token > 2 ** 32);
  const obj = { toString: () => 'from-toString' };
  assert.equal(await c.locks.request(obj, (lock) => lock.name), 'from-toString');
});

test('the callback never runs synchronously inside request()', async () => {
  let ran = false;
  const p = c.locks.request(uniq('sync'), () => { ran = true; });
  assert.equal(ran, false);
  await p;
  assert.equal(ran, true);
});

test('promise settles with the callback result, only after the release', async () => {
  const res = uniq('rel');
  const order = [];
  const hold = deferred();
  const returned = c.locks.request(res, () => hold.promise);
  returned.then(() => order.push('returned'));
  hold.promise.then(() => order.push('holding'));
  await c.locks.query();
  // a waiter from another connection: granted only once released
  const waiter = c2.locks.request(res, async () => {
    order.push('waiter');
    return 'w';
  });
  hold.resolve('v');
  assert.equal(await returned, 'v');
  await waiter;
  assert.equal(order[0], 'holding');
  assert.ok(order.indexOf('returned') > 0 && order.indexOf('waiter') > 0, order.join());
  const err = { name: 'test' };
  await assert.rejects(c.locks.request(res, () => { throw err; }), (e) => e === err);
  await assert.rejects(c.locks.request(res, async () => { throw err; }), (e) => e === err);
});

test('released before settle: the next request after the promise sees it free', async () => {
  const res = uniq('free');
  for (let i = 0; i < 20; i++) {
    await c.locks.request(res, () => {});
    const seen = await c2.locks.request(res, { ifAvailable: true }, (l) => l !== null);
    assert.ok(seen, `round ${i}: the release took effect before the promise settled`);
  }
});

test('exclusive: FIFO on one name and independent across names', async () => {
  const a = uniq('fifo-a'), b = uniq('fifo-b');
  const order = [];
  const first = deferred();
  const p1 = c.locks.request(a, () => first.promise);
  const ps = [];
  for (let i = 0; i < 5; i++) {
    // two connections: the broker's order is the order of arrival, so each
    // request is known queued (a later call on its connection answered)
    // before the next one is made
    const who = i % 2 ? c2 : c;
    ps.push(who.locks.request(a, () => { order.push(i); }));
    await who.locks.query();
  }
  // another name is not blocked by a
  assert.equal(await c2.locks.request(b, () => 'b'), 'b');
  const st = await c.locks.query();
  assert.equal(st.pending.filter((e) => e.name === a).length, 5);
  first.resolve();
  await Promise.all([p1, ...ps]);
  assert.deepEqual(order, [0, 1, 2, 3, 4]);
});

test('shared and exclusive mixing', async () => {
  const res = uniq('mix');
  const events = [];
  const s1 = deferred(), s2 = deferred();
  const both = deferred();
  const p1 = c.locks.request(res, { mode: 'shared' }, async () => { events.push('s1'); if (events.length === 2) both.resolve(); await s1.promise; });
  const p2 = c2.locks.request(res, { mode: 'shared' }, async () => { events.push('s2'); if (events.length === 2) both.resolve(); await s2.promise; });
  // both shared granted at once
  await both.promise;
  events.sort();
  const px = c.locks.request(res, () => { events.push('x'); });
  await c.locks.query();
  // a shared request queued behind the waiting exclusive one waits too
  const p3 = c2.locks.request(res, { mode: 'shared' }, () => { events.push('s3'); });
  await c2.locks.query();
  const st = await c.locks.query();
  assert.deepEqual(st.held.filter((e) => e.name === res).map((e) => e.mode), ['shared', 'shared']);
  assert.deepEqual(st.pending.filter((e) => e.name === res).map((e) => e.mode), ['exclusive', 'shared']);
  s1.resolve();
  await p1;
  assert.deepEqual(events, ['s1', 's2']);
  s2.resolve();
  await Promise.all([p2, px, p3]);
  assert.deepEqual(events, ['s1', 's2', 'x', 's3']);
});

test('ifAvailable: null when held or queued, a Lock when free', async () => {
  const res = uniq('ifa');
  assert.ok(await c.locks.request(res, { ifAvailable: true }, (l) => l instanceof Lock));
  const hold = deferred();
  const p = c.locks.request(res, () => hold.promise);
  await c.locks.query();          // ensure it is granted (same connection: in order)
  let cbArg = 'unset';
  assert.equal(await c2.locks.request(res, { ifAvailable: true }, (l) => { cbArg = l; return 'r'; }), 'r');
  assert.equal(cbArg, null);
  // shared ifAvailable while a shared is held: granted
  const res2 = uniq('ifa-shared');
  const h2 = deferred();
  const ps = c.locks.request(res2, { mode: 'shared' }, () => h2.promise);
  assert.ok(await c2.locks.request(res2, { mode: 'shared', ifAvailable: true }, (l) => l !== null));
  // ... but not when someone waits
  const px = c.locks.request(res2, () => {});
  await c.locks.query();
  assert.equal(await c2.locks.request(res2, { mode: 'shared', ifAvailable: true }, (l) => l), null);
  hold.resolve();
  h2.resolve();
  await Promise.all([p, ps, px]);
});

test('steal: loser rejects with AbortError, lock.signal aborts, waiters stay queued', async () => {
  const res = uniq('steal');
  const got = deferred();
  let loserLock;
  const loser = c.locks.request(res, (l) => { loserLock = l; got.resolve(); return never(); });
  await got.promise;
  assert.equal(loserLock.signal.aborted, false);
  let granted = false;
  const waiting = c.locks.request(res, () => { granted = true; });
  await c.locks.query();
  const thief = c2.locks.request(res, { steal: true }, (l) => {
    assert.notEqual(l, null);
    assert.equal(granted, false, 'the steal overrides the queue');
    return 'stolen';
  });
  await assert.rejects(loser, (e) => e instanceof DOMException && e.name === 'AbortError');
  assert.equal(loserLock.signal.aborted, true);
  assert.equal(loserLock.signal.reason.name, 'AbortError');
  assert.equal(await thief, 'stolen');
  await waiting;
  assert.equal(granted, true);
  // last caller wins
  const res2 = uniq('steal2');
  const first = assert.rejects(c.locks.request(res2, () => never()), { name: 'AbortError' });
  await c.locks.query();
  const firstSteal = assert.rejects(c.locks.request(res2, { steal: true }, () => never()), { name: 'AbortError' });
  await c.locks.query();
  await c2.locks.request(res2, { steal: true }, () => {});
  await first;
  await firstSteal;
});

test('lock.signal first read after the lock was lost: already aborted, with the loss as reason', async () => {
  // the signal is made on first read (locks.js): one read only after the
  // steal must still see it aborted, and every read the same signal
  const res = uniq('late-signal');
  const got = deferred();
  const gone = deferred();
  let lock;
  const loser = c.locks.request(res, (l) => { lock = l; got.resolve(); return gone.promise; });
  await got.promise;
  let why;
  const lost = assert.rejects(loser, (e) => { why = e; return e instanceof DOMException && e.name === 'AbortError'; });
  await c2.locks.request(res, { steal: true }, () => {});
  await lost;
  const s = lock.signal;
  assert.equal(s.aborted, true);
  assert.equal(s.reason, why);
  assert.equal(lock.signal, s);
  gone.resolve();
});

test('abort: already aborted, while queued, synchronously, after grant', async () => {
  const res = uniq('abort');
  // already aborted: the signal's reason
  const ac0 = new AbortController();
  const why = new Error('mine');
  ac0.abort(why);
  await assert.rejects(c.locks.request(res, { signal: ac0.signal }, () => assert.fail('ran')), (e) => e === why);
  const ac00 = new AbortController();
  ac00.abort();
  await rejectsDOM(c.locks.request(res, { signal: ac00.signal }, () => {}), 'AbortError');

  // while queued
  const hold = deferred();
  const { p: holder } = await queued(c, res, () => hold.promise);
  const ac1 = new AbortController();
  const p = c2.locks.request(res, { signal: ac1.signal }, () => assert.fail('ran'));
  let st = await c2.locks.query();
  assert.equal(st.pending.filter((e) => e.name === res).length, 1);
  ac1.abort();
  await rejectsDOM(p, 'AbortError');
  st = await c2.locks.query();
  assert.equal(st.pending.filter((e) => e.name === res).length, 0, 'the cancel removed it');
  hold.resolve();
  await holder;

  // synchronously after request(), though grantable: aborted, and the name is not blocked
  const ac2 = new AbortController();
  let ran = false;
  const p2 = c.locks.request(res, { signal: ac2.signal }, () => { ran = true; });
  ac2.abort();
  await rejectsDOM(p2, 'AbortError');
  assert.equal(ran, false);
  assert.equal(await c.locks.request(res, () => 'next'), 'next');

  // after the grant: no effect
  const ac3 = new AbortController();
  const acquired = deferred(), rel = deferred();
  const p3 = c.locks.request(res, { signal: ac3.signal }, () => { acquired.resolve(); return rel.promise; });
  await acquired.promise;
  ac3.abort();
  rel.resolve('resolved ok');
  assert.equal(await p3, 'resolved ok');
});

test('query(): held in grant order, pending in request order, clientIds', async () => {
  const a = uniq('q-a'), b = uniq('q-b'), cc = uniq('q-c');
  const hold = deferred();
  const ps = [];
  const add = async (...args) => ps.push((await queued(...args)).p);
  await add(c, b, () => hold.promise);
  await add(c2, a, () => hold.promise);
  await add(c, cc, { mode: 'shared' }, () => hold.promise);
  await add(c2, cc, { mode: 'shared' }, () => hold.promise);
  await add(c2, a, () => {});
  await add(c, b, { mode: 'shared' }, () => {});
  await add(c2, b, () => {});
  await add(c, a, { mode: 'shared' }, () => {});
  const st = await c.locks.query();
  const mine = new Set([a, b, cc]);
  const held = st.held.filter((e) => mine.has(e.name));
  const pending = st.pending.filter((e) => mine.has(e.name));
  assert.deepEqual(held.map((e) => [e.name, e.mode]), [[b, 'exclusive'], [a, 'exclusive'], [cc, 'shared'], [cc, 'shared']]);
  assert.deepEqual(pending.map((e) => [e.name, e.mode]), [[a, 'exclusive'], [b, 'shared'], [b, 'exclusive'], [a, 'shared']]);
  const id1 = c.clientId, id2 = c2.clientId;
  assert.notEqual(id1, id2);
  assert.deepEqual(held.map((e) => e.clientId), [id1, id2, id1, id2]);
  assert.deepEqual(pending.map((e) => e.clientId), [id2, id1, id2, id1]);
  assert.equal(typeof id1, 'string');
  // stable per client
  assert.equal((await c2.locks.query()).held.find((e) => e.name === b).clientId, id1);
  hold.resolve();
  await Promise.all(ps);
  assert.deepEqual((await c.locks.query()).held.filter((e) => mine.has(e.name)), []);
});

test('names: any string, lone surrogates kept and distinct', async () => {
  for (const name of ['', 'abc\x00def', '\uD800', '\uDC00', '\uDC00\uD800', '\uFFFF', '\u{1F600}', 'é'.repeat(300)]) {
    const seen = await c.locks.request(name, async (l) => {
      assert.equal(l.name, name);
      const st = await c.locks.query();
      return st.held.filter((e) => e.name === name).length;
    });
    assert.equal(seen, 1, `query shows ${JSON.stringify(name)} as is`);
  }
  // '\uD800' and '\uFFFD' (what a USVString conversion would make) are two locks
  await c.locks.request('\uD800', async () => {
    assert.equal(await c2.locks.request('\uFFFD', { ifAvailable: true }, (l) => l && l.name), '\uFFFD');
    assert.equal(await c2.locks.request('\uD800', { ifAvailable: true }, (l) => l), null);
  });
  // over 1024 bytes: the broker's limit
  await assert.rejects(c.locks.request('x'.repeat(1025), () => {}), { code: 'INVALID_OPTIONS' });
});

test('timeout (coord addition): TimeoutError while waiting', async () => {
  const res = uniq('to');
  const hold = deferred();
  const p = c.locks.request(res, () => hold.promise);
  await c.locks.query();
  await assert.rejects(c2.locks.request(res, { timeout: 50 }, () => assert.fail('ran')),
    (e) => e.code === 'TIMEOUT' && e.name === 'TimeoutError');
  hold.resolve();
  await p;
});

test('lease (coord addition): renewed while the callback runs; a frozen holder expires', async () => {
  const res = uniq('lease');
  // renewed: held three times its lease
  const r = await c.locks.request(res, { lease: 500 }, async (l) => {
    await new Promise((ok) => setTimeout(ok, 1600));
    return l.signal.aborted;
  });
  assert.equal(r, false);
  // a holder in a child process, then SIGSTOP: its lease runs out, we get the lock
  const child = spawn(process.execPath, ['testlib/hold-child.js', broker.socket, res, '200'],
    { cwd: PKG, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  const line = (want) => new Promise((ok) => {
    const on = (d) => { out += d; if (out.includes(want)) { child.stdout.off('data', on); ok(); } };
    child.stdout.on('data', on);
    on('');
  });
  await line('held\n');
  child.kill('SIGSTOP');
  const token = await c.locks.request(res, (l) => l.token);
  assert.ok(token > 0);
  child.kill('SIGCONT');
  await line('lost AbortError\n');
  const code = await new Promise((ok) => child.once('exit', ok));
  assert.equal(code, 0);
});
