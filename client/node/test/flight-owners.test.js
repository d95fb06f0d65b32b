// Who runs a flight, against a real coordd (note 002 §8, §10, §15, §21): the
// -flights events name the owner, its start, deadline and version; records
// name who wrote them; a join supersedes a stale owner; two versions of the
// client race on one key; a follower's timeout falls back by policy.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, FencedError, TimeoutError } from '../src/index.js';
import { startBroker, deferred } from '../testlib/broker.js';

let broker, a, b, c, w;
let n = 0;
const uniq = (t) => `${t}-${++n}`;
before(async () => {
  broker = await startBroker();
  [a, b, c, w] = await Promise.all(['tab-a', 'tab-b', 'tab-c', 'watcher'].map((client) =>
    connect({ socket: broker.socket, client })));
});
after(async () => {
  await Promise.all([a.close(), b.close(), c.close(), w.close()]);
  await broker.stop();
});

// A -flights watch, ready; next(what, key) resolves the next such event.
async function flights() {
  const it = w.watch(['-flights']);
  await it.ready;
  return {
    async next(what, key) {
      for (;;) {
        const { value, done } = await it.next();
        if (done) throw new Error('watch ended');
        if (value.what === what && (key === undefined || value.key === key)) return value;
      }
    },
    close: () => it.return(),
  };
}

test('events and records name the owner, its deadline and version', async () => {
  const key = uniq('me');
  const ev = await flights();
  const go = deferred();
  const run = a.once(key, async () => { await go.promise; return { name: 'ada' }; },
    { ttl: 60000, keep: 60000, version: 'bundle-7' });
  const started = await ev.next('started', key);
  assert.equal(started.client, 'tab-a');
  assert.equal(started.pid, process.pid);
  assert.equal(typeof started.instance, 'string');
  assert.ok(started.instance.length > 0);
  assert.equal(started.version, 'bundle-7');
  assert.equal(started.deadlineMs, started.startedMs + 60000);
  go.resolve();
  await run;
  const done = await ev.next('completed', key);
  assert.equal(done.client, 'tab-a');
  assert.equal(typeof done.durationMs, 'number');
  const rec = await b.records.get(key);
  assert.deepEqual([rec.client, rec.pid, rec.version], ['tab-a', process.pid, 'bundle-7']);
  const [entry] = await b.records.list(key);
  assert.equal(entry.client, 'tab-a');
  // a failure's code and retryable, never its message
  const failKey = uniq('fail');
  const err = Object.assign(new Error('secret text'), { code: 'HTTP_503' });
  await assert.rejects(a.once(failKey, () => { throw err; }, { retryable: true }));
  const failed = await ev.next('failed', failKey);
  assert.equal(failed.code, 'HTTP_503');
  assert.equal(failed.retryable, true);
  assert.equal(failed.message, undefined);
  await ev.close();
});

test('supersede: the stale owner is aborted and fenced, its follower gets the fresh value', async () => {
  const key = uniq('feed');
  const ev = await flights();
  let staleSignal;
  const stale = a.once(key, ({ signal }) => new Promise((_, reject) => {
    staleSignal = signal;
    signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  }));
  const staleOutcome = stale.then(() => assert.fail('the stale owner resolved'), (x) => x);
  const st = await ev.next('started', key);
  const follower = b.once(key, () => assert.fail('the follower ran'));
  await ev.next('joined', key);
  const fresh = await c.once(key, () => 'fresh', { supersede: true });
  assert.equal(fresh.source, 'owner');
  assert.equal(fresh.value, 'fresh');
  assert.equal(fresh.superseded, st.fence);
  assert.equal((await follower).value, 'fresh');
  const e = await staleOutcome;
  assert.ok(e instanceof FencedError);
  assert.equal(e.reason, 'superseded');
  assert.equal(staleSignal.reason.reason, 'superseded');
  const sup = await ev.next('superseded', key);
  assert.equal(sup.client, 'tab-a');
  // the low-level calls: a higher priority supersedes, the old owner's
  // complete is FENCED with reason superseded
  const k2 = uniq('prio');
  const j1 = await a.flight.join(k2, { priority: 1 });
  const j2 = await b.flight.join(k2, { priority: 2 });
  assert.equal(j2.role, 'owner');
  assert.equal(j2.superseded, j1.fence);
  const k3 = uniq('ver');
  const jv = await a.flight.join(k3, { version: 'v9' });
  assert.equal(jv.version, 'v9');
  await a.flight.complete(jv.flight, jv.fence, new Uint8Array([9]));
  await assert.rejects(a.flight.complete(j1.flight, j1.fence, new Uint8Array([1])),
    (x) => x instanceof FencedError && x.reason === 'superseded');
  await b.flight.complete(j2.flight, j2.fence, new Uint8Array([2]));
  await ev.close();
});

test('two versions race on one key: own flights, no record of the other version', async () => {
  const key = uniq('cfg');
  const ev = await flights();
  const goOld = deferred();
  const old = a.once(key, async () => { await goOld.promise; return 'v1'; }, { version: 'v1', keep: 60000 });
  await ev.next('started', key);
  // a new bundle that wants its own: a flight beside the old one
  const fresh = await b.once(key, () => 'v2', { version: 'v2', otherVersion: 'own', keep: 60000 });
  assert.equal(fresh.source, 'owner');
  // a compatible new bundle follows the old flight
  const compat = c.once(key, () => assert.fail('compat ran'), { version: 'v3' });
  await ev.next('joined', key);
  goOld.resolve();
  assert.equal((await old).value, 'v1');
  assert.equal((await compat).value, 'v1');
  // the record is v1's now: v2 wanting its own runs again, a compatible one takes it
  const again = await b.once(key, () => 'v2 again', { version: 'v2', otherVersion: 'own', maxAge: 60000 });
  assert.equal(again.source, 'owner');
  const taken = await c.once(key, () => assert.fail('ran'), { version: 'v3', maxAge: 60000 });
  assert.equal(taken.source, 'record');
  await assert.rejects(a.flight.join(key, { otherVersion: 'maybe' }), TypeError);
  await ev.close();
});

test('a follower whose wait passes falls back by policy', async () => {
  const key = uniq('slow');
  const j = await a.flight.join(key);
  await assert.rejects(b.once(key, () => 'here', { wait: 50 }), TimeoutError);
  const run = await b.once(key, () => 'here', { wait: 50, fallback: 'run' });
  assert.deepEqual([run.source, run.fallbackCause, run.value, run.retried], ['local', 'timeout', 'here', false]);
  const retry = await b.once(key, () => 'here', { wait: 50, fallback: 'retry' });
  assert.deepEqual([retry.source, retry.fallbackCause, retry.retried], ['local', 'timeout', true]);
  // the owner finishes during the second wait: its value, no local run
  const ev = await flights();
  const p = b.once(key, () => assert.fail('ran'), { wait: 300, fallback: 'retry' });
  await ev.next('follower_timeout', key);
  await ev.next('joined', key);
  await a.flight.complete(j.flight, j.fence, new Uint8Array([0xa5, 0x73, 0x68, 0x61, 0x72, 0x65]));
  const shared = await p;
  assert.deepEqual([shared.source, shared.value, shared.retried], ['live', 'share', true]);
  await ev.close();
});
