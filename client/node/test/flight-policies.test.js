// Single-flight's policies against a real coordd: stale-while-revalidate
// (stale, notify/onUpdated, flight.updated), backoff (RetryAfterError →
// BackoffError), the kill switch (flight.disable/enable/disabled), the
// fallback policy when the broker cannot be reached, and stats().latency.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  connect, BackoffError, ClosedError, ConnectError, FlightFailedError, RetryAfterError,
} from '../src/index.js';
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

// The next CustomEvent `type` on target.
const nextEvent = (target, type) => new Promise((r) => target.addEventListener(type, (e) => r(e.detail), { once: true }));

test('stale-while-revalidate: one revalidation owner gets the stale value, others are served stale and notified', async () => {
  const key = uniq('swr');
  const first = await a.once(key, () => ({ v: 1 }), { keep: 60000 });
  assert.equal(first.source, 'owner');
  assert.equal(first.revalidated, false);

  // maxAge 0 + stale: every record younger than a minute is stale but usable
  const go = deferred();
  let ctxStale;
  const reval = b.once(key, async ({ stale }) => {
    ctxStale = stale;
    await go.promise;
    return { v: 2 };
  }, { stale: 60000, keep: 60000 });
  await followers(a, key, 0);                       // the revalidation runs

  const updates = [];
  const eventOnC = nextEvent(c, 'flight.updated');
  const updated = deferred();
  const served = await c.once(key, () => assert.fail('a stale caller ran'), {
    stale: 60000, onUpdated: (u) => { updates.push(u); updated.resolve(u); },
  });
  assert.equal(served.source, 'stale');
  assert.equal(served.stale, true);
  assert.equal(served.revalidating, true);
  assert.deepEqual(served.value, { v: 1 });
  assert.equal(served.fence, first.fence);
  assert.ok(served.ageMs >= 0);
  assert.deepEqual(updates, [], 'no notice before the revalidation ends');

  go.resolve();
  const r = await reval;
  assert.equal(r.source, 'owner');
  assert.equal(r.revalidated, true);
  assert.deepEqual(ctxStale.value, { v: 1 });
  assert.equal(ctxStale.fence, first.fence);
  assert.ok(ctxStale.ageMs >= 0);
  const u = await updated.promise;
  assert.deepEqual(u, { key, status: 'completed', fence: r.fence });
  assert.deepEqual(await eventOnC, { key, status: 'completed', fence: r.fence });
  assert.equal(updates.length, 1);
  // the revalidated record is the one served now
  const fresh = await c.once(key, () => assert.fail('ran'), { maxAge: 60000 });
  assert.equal(fresh.source, 'record');
  assert.equal(fresh.stale, false);
  assert.deepEqual(fresh.value, { v: 2 });
  // with stale, the revalidated record is kept keep + stale
  const rec = await c.records.get(key);
  assert.ok(rec.expiresMs - rec.createdMs >= 120000 - 1000, `${rec.expiresMs - rec.createdMs}`);
});

test('a failed revalidation keeps the stale record and notifies "failed"', async () => {
  const key = uniq('swr-fail');
  await a.once(key, () => 'old', { keep: 60000 });
  const go = deferred();
  const reval = b.once(key, async ({ stale }) => {
    assert.equal(stale.value, 'old');
    await go.promise;
    throw Object.assign(new Error('upstream down'), { code: 'E_UP' });
  }, { stale: 60000 });
  await followers(a, key, 0);
  const updated = deferred();
  const served = await c.once(key, () => assert.fail('ran'), { stale: 60000, onUpdated: updated.resolve });
  assert.equal(served.value, 'old');
  assert.equal(served.revalidating, true);
  go.resolve();
  await assert.rejects(reval, { code: 'E_UP' });
  const u = await updated.promise;
  assert.equal(u.status, 'failed');
  assert.equal(u.key, key);
  assert.equal((await c.records.get(key)).value, 'old');
});

test('backoff: RetryAfterError → followers and later joins get BackoffError with what is left', async () => {
  const key = uniq('backoff');
  const go = deferred();
  const asked = new RetryAfterError(60000, 'upstream said 429');
  const owner = a.once(key, async () => { await go.promise; throw asked; });
  await followers(a, key, 0);
  const follower = b.once(key, () => assert.fail('a follower ran'));
  await followers(a, key, 1);
  const ownerR = assert.rejects(owner, (e) => e === asked);
  const followerR = assert.rejects(follower, (e) => e instanceof BackoffError && e instanceof FlightFailedError &&
    e.source === 'live' && e.retryAfter === 60000 && e.retryable === true && e.code === 'RETRY_AFTER' &&
    e.message === 'upstream said 429');
  go.resolve();
  await ownerR;
  await followerR;
  let ran = false;
  await assert.rejects(c.once(key, () => { ran = true; }), (e) => e instanceof BackoffError &&
    e.source === 'backoff' && e.retryAfter > 0 && e.retryAfter <= 60000 && e.code === 'RETRY_AFTER');
  assert.equal(ran, false);
  const s = await c.stats();
  assert.ok(s.backoffs >= 1 && s.backoffAnswers >= 1);

  // any error with a numeric retryAfter asks for one too; low level: the fields
  const key2 = uniq('backoff-low');
  await assert.rejects(a.once(key2, () => { throw Object.assign(new Error('slow down'), { retryAfter: 30000 }); }),
    { message: 'slow down' });
  const j = await b.flight.join(key2);
  assert.equal(j.role, 'failed');
  assert.equal(j.source, 'backoff');
  assert.equal(j.retryable, true);
  assert.ok(j.retryAfter > 0 && j.retryAfter <= 30000);
  const k3 = await a.flight.join(uniq('backoff-type'));
  await assert.rejects(a.flight.fail(k3.flight, k3.fence, { code: 'X' }, { retryable: false, retryAfter: 5 }), TypeError);
  await a.flight.fail(k3.flight, k3.fence, { code: 'X' });
});

test('backoff inside the stale window: served stale with revalidating false, nobody owns', async () => {
  const key = uniq('swr-backoff');
  await a.once(key, () => 'cached', { keep: 60000 });
  await assert.rejects(b.once(key, () => { throw new RetryAfterError(60000); }, { stale: 60000 }), RetryAfterError);
  const r = await c.once(key, () => assert.fail('ran during the backoff'), { stale: 60000 });
  assert.equal(r.source, 'stale');
  assert.equal(r.stale, true);
  assert.equal(r.revalidating, false);
  assert.equal(r.value, 'cached');
});

test('kill switch: disable(prefix) makes every join an owner (bypass), no record; enable restores', { timeout: 10000 }, async () => {
  const prefix = uniq('ks') + '/';
  const key = `${prefix}k`;
  const events = a.watch(['-flights']);
  await events.ready;
  await a.flight.disable(prefix);
  assert.ok((await b.flight.disabled()).includes(prefix));
  for await (const ev of events) if (ev.what === 'disabled' && ev.prefix === prefix) break;

  const go = deferred();
  const both = deferred();
  let runs = 0;
  const fn = async ({ bypass }) => {
    assert.equal(bypass, true);
    if (++runs === 2) both.resolve();
    await go.promise;
    return runs;
  };
  const p1 = a.once(key, fn, { keep: 60000 });
  const p2 = b.once(key, fn, { keep: 60000 });
  await both.promise;              // both run at once: no deduplication (else this times out)
  go.resolve();
  const [r1, r2] = await Promise.all([p1, p2]);
  assert.equal(r1.source, 'bypass');
  assert.equal(r2.source, 'bypass');
  assert.equal(r1.bypass, true);
  assert.equal(r2.bypass, true);
  assert.equal(await c.records.get(key), null, 'a bypassed flight writes no record');

  await c.flight.enable(prefix);
  assert.ok(!(await a.flight.disabled()).includes(prefix));
  const r3 = await a.once(key, () => 'normal');
  assert.equal(r3.bypass, false);
  assert.equal(r3.source, 'owner');
  await assert.rejects(a.flight.disable('-'.repeat(2000)), { code: 'INVALID_OPTIONS' });
});

test('fallback: the connection drops while waiting → run locally (run) / ClosedError (fail)', async () => {
  const own = await startBroker();
  const x = await connect({ socket: own.socket });
  const y = await connect({ socket: own.socket });
  const z = await connect({ socket: own.socket });
  const key = uniq('fb-drop');
  const started = deferred();
  const owner = x.once(key, async ({ signal }) => {
    started.resolve();
    await new Promise((r) => signal.addEventListener('abort', r));
    return 'computed anyway';
  });
  await started.promise;
  const local = y.once(key, ({ fence, local: isLocal }) => ({ fence, isLocal }), { fallback: 'run' });
  const failing = z.once(key, () => assert.fail('ran'));
  await followers(x, key, 2);
  const failingR = assert.rejects(failing, ClosedError);
  const ownerR = assert.rejects(owner, ClosedError);         // the owner's policy is 'fail'
  await own.kill();
  const r = await local;
  assert.equal(r.source, 'local');
  assert.deepEqual(r.value, { fence: undefined, isLocal: true });
  assert.ok(r.reason instanceof ClosedError);
  await failingR;
  await ownerR;
  // the client is gone for good: 'run' runs at once, 'fail' rejects
  assert.equal((await y.once(key, () => 'again', { fallback: 'run' })).source, 'local');
  await assert.rejects(z.once(key, () => 'x'), ClosedError);
  // close() is not "unreachable"
  await y.close();
  await assert.rejects(y.once(key, () => 'x', { fallback: 'run' }), ClosedError);
  await Promise.all([x.close(), z.close()]);
});

test('fallback: an owner whose connection drops keeps its value with "run"', async () => {
  const own = await startBroker();
  const x = await connect({ socket: own.socket });
  const started = deferred();
  const p = x.once(uniq('fb-owner'), async ({ signal }) => {
    started.resolve();
    await new Promise((r) => signal.addEventListener('abort', r));
    return 42;
  }, { fallback: 'run' });
  await started.promise;
  await own.kill();
  const r = await p;
  assert.equal(r.source, 'local');
  assert.equal(r.value, 42);
  assert.ok(r.reason instanceof ClosedError);
  await x.close();
});

test('fallback: reconnect (autostart) fails → run locally, or reject with the ConnectError', async () => {
  const own = await startBroker();
  const x = await connect({ socket: own.socket, reconnect: true, broker: '/nonexistent/coordd', connectTimeout: 500 });
  const gone = nextEvent(x, 'disconnect');
  await own.kill();
  await gone;
  const r = await x.once(uniq('fb-connect'), () => 'here', { fallback: 'run' });
  assert.equal(r.source, 'local');
  assert.equal(r.value, 'here');
  assert.ok(r.reason instanceof ConnectError);
  await assert.rejects(x.once(uniq('fb-connect'), () => 'x'), (e) => e instanceof ConnectError &&
    /cannot start the broker/.test(e.message));
  await x.close();
  await assert.rejects(x.once('k', () => 1, { fallback: 'bogus' }), TypeError);
});

test('onUpdated: connection lost before the notice → status "lost"', async () => {
  const own = await startBroker();
  const [x, y] = await Promise.all([1, 2].map(() => connect({ socket: own.socket })));
  const key = uniq('swr-lost');
  await x.once(key, () => 1, { keep: 60000 });
  const started = deferred();
  const reval = x.once(key, async ({ signal }) => {
    started.resolve();
    await new Promise((r) => signal.addEventListener('abort', r));
  }, { stale: 60000 }).catch((e) => e);
  await started.promise;
  const lost = deferred();
  const r = await y.once(key, () => assert.fail('ran'), { stale: 60000, onUpdated: lost.resolve });
  assert.equal(r.revalidating, true);
  await own.kill();
  const u = await lost.promise;
  assert.equal(u.status, 'lost');
  assert.equal(u.key, key);
  assert.ok(u.error instanceof ClosedError);
  assert.ok(await reval instanceof ClosedError);
  await Promise.all([x.close(), y.close()]);
});

test('stats().latency: the broker\'s histograms', async () => {
  await a.once(uniq('lat'), () => 1);
  await a.locks.request(uniq('lat-lock'), () => {});
  const { latency } = await a.stats();
  for (const k of ['lockWait', 'lockHold', 'flightRun', 'followerWait', 'leaderTransition']) {
    assert.equal(typeof latency[k].count, 'number', k);
    for (const f of ['p50Ms', 'p99Ms', 'maxMs']) assert.equal(typeof latency[k][f], 'number', `${k}.${f}`);
  }
  assert.ok(latency.flightRun.count >= 1);
  assert.ok(latency.lockHold.count >= 1);
  assert.ok(latency.flightRun.maxMs >= latency.flightRun.p50Ms);
});
