// client.once, client.flight.* and client.records.* against a real coordd.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, AbortedError, FencedError, FlightFailedError, TimeoutError } from '../src/index.js';
import { startBroker, deferred } from '../testlib/broker.js';

let broker, a, b, c;
let n = 0;
const uniq = (t) => `${t}-${++n}`;
before(async () => {
  broker = await startBroker();
  [a, b, c] = await Promise.all([1, 2, 3].map(() => connect({ socket: broker.socket })));
});
after(async () => {
  await Promise.all([a.close(), b.close(), c.close()]);
  await broker.stop();
});

// Resolves once the flight of key has `count` followers.
async function followers(client, key, count) {
  const w = client.watch(['-flights']);
  await w.ready;
  const has = async () => ((await client.flight.list()).find((f) => f.key === key)?.followers ?? -1) >= count;
  if (await has()) { await w.return(); return; }
  for await (const ev of w) if (ev.what === 'joined' && ev.key === key && await has()) break;
}

test('one owner runs, followers get its value live', async () => {
  const key = uniq('live');
  const release = deferred();
  let runs = 0;
  const owner = a.once(key, async ({ fence, signal }) => {
    runs++;
    assert.ok(fence > 0);
    assert.equal(signal.aborted, false);
    await release.promise;
    return { answer: 42, when: 'now' };
  });
  await followers(a, key, 0);
  const f1 = b.once(key, () => assert.fail('a follower ran'));
  const f2 = c.once(key, () => assert.fail('a follower ran'));
  await followers(a, key, 2);
  release.resolve();
  const [o, r1, r2] = await Promise.all([owner, f1, f2]);
  assert.equal(runs, 1);
  assert.equal(o.source, 'owner');
  assert.equal(o.delivered, 2);
  for (const r of [r1, r2]) {
    assert.equal(r.source, 'live');
    assert.deepEqual(r.value, { answer: 42, when: 'now' });
    assert.equal(r.fence, o.fence);
  }
});

test('keep + maxAge: a later caller reads the record; records.get/list/purge', async () => {
  const key = uniq('rec');
  const o = await a.once(key, () => [1, 2, 3], { keep: 60000 });
  assert.equal(o.source, 'owner');
  const r = await b.once(key, () => assert.fail('ran again'), { maxAge: 60000 });
  assert.equal(r.source, 'record');
  assert.deepEqual(r.value, [1, 2, 3]);
  assert.ok(r.ageMs >= 0);
  const rec = await c.records.get(key);
  assert.equal(rec.status, 'completed');
  assert.deepEqual(rec.value, [1, 2, 3]);
  assert.equal(rec.fence, o.fence);
  assert.ok(rec.expiresMs > rec.createdMs);
  const list = await c.records.list('rec-');
  assert.ok(list.some((e) => e.key === key && e.status === 'completed'));
  assert.equal(await c.records.get(uniq('none')), null);
  assert.ok(await c.records.purge(key) >= 1);
  assert.equal(await c.records.get(key), null);
  // without maxAge the record is not used
  assert.equal((await b.once(key, () => 'fresh')).source, 'owner');
});

test('logout during a request: records.purge ends the flight, its result is not kept', async () => {
  const key = uniq('purge');
  const go = deferred();
  let aborted;
  const owner = a.once(key, async ({ signal }) => {
    signal.addEventListener('abort', () => { aborted = signal.reason; go.resolve(); });
    await go.promise;
    return 'private';
  }, { keep: 60000 });
  await followers(c, key, 0);      // a owns it before b joins
  const follower = b.once(key, () => assert.fail('ran'));
  await followers(c, key, 1);
  // the broker fails them before it answers the purge: handled from now on
  const followerR = assert.rejects(follower, (e) => e instanceof AbortedError && e.reason === 'purged');
  const ownerR = assert.rejects(owner, (e) => e instanceof FencedError && e.reason === 'purged');
  assert.deepEqual(await c.records.purge(key, { counts: true }), { deleted: 0, fenced: 1 });
  await followerR;
  await ownerR;
  assert.ok(aborted instanceof FencedError && aborted.reason === 'purged');
  assert.equal(await c.records.get(key), null);
  assert.equal(await c.records.purge(key), 0);
});

test('raw values travel as bytes', async () => {
  const key = uniq('raw');
  const go = deferred();
  const owner = a.once(key, async () => { await go.promise; return new Uint8Array([0, 255, 7]); }, { raw: true });
  await followers(a, key, 0);
  const f = b.once(key, () => {}, { raw: true });
  await followers(a, key, 1);
  go.resolve();
  const [o, r] = await Promise.all([owner, f]);
  assert.deepEqual(r.value, new Uint8Array([0, 255, 7]));
  assert.ok(r.value instanceof Uint8Array);
  assert.equal(o.source, 'owner');
  await assert.rejects(a.once(uniq('raw-bad'), () => 'not bytes', { raw: true }), TypeError);
});

test('a throwing function becomes flight.fail; retryable failures are joined again', async () => {
  const key = uniq('fail');
  const go = deferred();
  const boom = Object.assign(new Error('it broke'), { code: 'E_BROKE' });
  const owner = a.once(key, async () => { await go.promise; throw boom; });
  await followers(a, key, 0);
  const f = b.once(key, () => assert.fail('ran'));
  await followers(a, key, 1);
  const ownerR = assert.rejects(owner, (e) => e === boom);
  const fR = assert.rejects(f, (e) => e instanceof FlightFailedError && e.code === 'E_BROKE' &&
    e.message === 'it broke' && e.retryable === false);
  go.resolve();
  await ownerR;
  await fR;

  // retryable: the follower joins again and becomes the owner itself
  const key2 = uniq('retry');
  const go2 = deferred();
  const owner2 = a.once(key2, async () => { await go2.promise; throw new Error('transient'); }, { retryable: true });
  await followers(a, key2, 0);
  const f2 = b.once(key2, () => 'second try');
  await followers(a, key2, 1);
  go2.resolve();
  await assert.rejects(owner2, { message: 'transient' });
  const r2 = await f2;
  assert.equal(r2.source, 'owner');
  assert.equal(r2.value, 'second try');
});

test("an owner's long error is cut to the limits in UTF-8 bytes, not characters", async () => {
  const key = uniq('long-error');
  const go = deferred();
  // 400 bytes of code, 6003 bytes of message (3001 characters): cut at 256 and 4096 bytes
  const boom = Object.assign(new Error('é'.repeat(3000) + '€'), { code: 'É'.repeat(200) });
  const owner = a.once(key, async () => { await go.promise; throw boom; });
  await followers(a, key, 0);
  const f = b.once(key, () => assert.fail('ran'));
  await followers(a, key, 1);
  const ownerR = assert.rejects(owner, (e) => e === boom);
  const fR = assert.rejects(f, (e) => e instanceof FlightFailedError &&
    e.code === 'É'.repeat(128) && e.message === 'é'.repeat(2048));
  go.resolve();
  await ownerR;
  await fR;          // the broker took the failure: the follower heard it
  assert.deepEqual((await a.flight.list()).filter((x) => x.key === key), []);
});

test('ttl passed: the owner signal aborts, a follower is promoted and runs', async () => {
  const key = uniq('ttl');
  const started = deferred();
  const owner = a.once(key, async ({ signal }) => {
    started.resolve();
    await new Promise((r) => signal.addEventListener('abort', r));
    assert.ok(signal.reason instanceof FencedError);
    assert.equal(signal.reason.reason, 'deadline');
    return 'too late';
  }, { ttl: 150 });
  await started.promise;
  const f = b.once(key, ({ fence }) => ({ promoted: fence }), { ttl: 5000 });
  await assert.rejects(owner, FencedError);
  const r = await f;
  assert.equal(r.source, 'owner');
  assert.ok(r.value.promoted > 0);
});

test('owner gone: the longest-waiting follower is promoted; abortWhenOrphaned', async () => {
  const key = uniq('gone');
  const solo = await connect({ socket: broker.socket });
  const started = deferred();
  const lost = solo.once(key, async ({ signal }) => { started.resolve(); await new Promise((r) => signal.addEventListener('abort', r)); });
  const lostR = assert.rejects(lost);
  await started.promise;
  const f = b.once(key, ({ fence }) => `promoted with ${fence}`);
  await followers(a, key, 1);
  await solo.close();
  await lostR;
  assert.match((await f).value, /^promoted with \d+$/);

  const key2 = uniq('orphan');
  const aborted = deferred();
  const owner = a.once(key2, async ({ signal }) => {
    await new Promise((r) => signal.addEventListener('abort', r));
    aborted.resolve(signal.reason.reason);
    return 'nobody cares';
  }, { abortWhenOrphaned: true });
  await followers(a, key2, 0);
  const ac = new AbortController();
  const f2 = b.once(key2, () => {}, { signal: ac.signal });
  const f2R = assert.rejects(f2, { name: 'AbortError' });
  await followers(a, key2, 1);
  ac.abort();
  await f2R;
  assert.equal(await aborted.promise, 'orphaned');
  await owner.catch(() => {});
});

test("an owner whose caller aborts (its signal) hands the flight on: a follower runs, never gets the AbortError", async () => {
  const key = uniq('owner-aborts');
  const ac = new AbortController();
  const started = deferred();
  const owner = a.once(key, async ({ signal }) => {
    started.resolve();
    await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
  }, { signal: ac.signal });
  const ownerR = assert.rejects(owner, { name: 'AbortError' });
  await started.promise;
  const f = b.once(key, ({ fence }) => `ran with ${fence}`);
  await followers(a, key, 1);
  ac.abort();
  await ownerR;
  const r = await f;
  assert.equal(r.source, 'owner');
  assert.match(r.value, /^ran with \d+$/);
});

test('wait passed: TimeoutError', async () => {
  const key = uniq('wait');
  const go = deferred();
  const owner = a.once(key, () => go.promise);
  await followers(a, key, 0);
  await assert.rejects(b.once(key, () => {}, { wait: 50 }), (e) => e instanceof TimeoutError && e.code === 'TIMEOUT');
  go.resolve('x');
  await owner;
});

test('flight.join / complete / fail / list, FENCED for the old owner', async () => {
  const key = uniq('low');
  const j = await a.flight.join(key, { ttl: 10000 });
  assert.equal(j.role, 'owner');
  assert.ok(j.signal instanceof AbortSignal);
  const fp = b.flight.join(key);
  await followers(a, key, 1);
  const list = await c.flight.list();
  const e = list.find((x) => x.key === key);
  assert.equal(e.flight, j.flight);
  assert.equal(e.followers, 1);
  assert.equal((await a.flight.complete(j.flight, j.fence, new Uint8Array([9]))).delivered, 1);
  const r = await fp;
  assert.equal(r.role, 'result');
  assert.deepEqual(r.result, new Uint8Array([9]));
  await assert.rejects(a.flight.complete(j.flight, j.fence, new Uint8Array([1])), (err) => err instanceof FencedError && err.code === 'FENCED');
  const j2 = await a.flight.join(uniq('low2'));
  const fp2 = b.flight.join(j2.key);
  await followers(a, j2.key, 1);
  await a.flight.fail(j2.flight, j2.fence, { code: 'NOPE', message: 'no' }, { retryable: true });
  const r2 = await fp2;
  assert.equal(r2.role, 'failed');
  assert.deepEqual(r2.error, { code: 'NOPE', message: 'no' });
  assert.equal(r2.retryable, true);
});
