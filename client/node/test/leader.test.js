// client.leader and client.leaders against a real coordd.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, LeaderState, FencedError, DisabledError, TimeoutError } from '../src/index.js';
import { startBroker, deferred } from '../testlib/broker.js';

let broker, a, b;
let n = 0;
const uniq = (t) => `${t}-${++n}`;
before(async () => {
  broker = await startBroker();
  a = await connect({ socket: broker.socket, client: 'leader-a' });
  b = await connect({ socket: broker.socket, client: 'leader-b' });
});
after(async () => {
  await Promise.all([a.close(), b.close()]);
  await broker.stop();
});

test('campaign, lead, commit at most once, read, resign', async () => {
  const ws = uniq('ws');
  let L;
  const r = await a.leader(ws, { lease: 5000 }, async (leader) => {
    L = leader;
    assert.equal(leader.state, LeaderState.LEADER);
    assert.equal(leader.workstream, ws);
    assert.ok(leader.generation >= 1);
    assert.equal(leader.signal.aborted, false);
    assert.deepEqual(await leader.commit('op-1', 'config', { v: 1 }), { applied: true });
    const dup = await leader.commit('op-1', 'config', { v: 2 });
    assert.equal(dup.applied, false);
    assert.equal(dup.duplicate, true);
    assert.equal(dup.generation, leader.generation);
    assert.deepEqual(await leader.read('config'), { value: { v: 1 }, generation: leader.generation });
    assert.equal(await leader.read('missing'), null);
    const info = await b.leaders.info(ws);
    assert.equal(info.state, 'leading');
    assert.equal(info.client, 'leader-a');
    return 'done';
  });
  assert.equal(r, 'done');
  assert.equal(L.state, LeaderState.RELEASED);
  assert.equal((await b.leaders.info(ws)).state, 'idle');
  assert.deepEqual(await b.leaders.read(ws, 'config'), { value: { v: 1 }, generation: L.generation });
  // resigned: the old generation is fenced
  await assert.rejects(L.commit('op-2', 'config', 3), (e) => e instanceof FencedError && e.code === 'FENCED');
  // the next leader gets a higher generation
  const g2 = await b.leader(ws, (leader) => leader.generation);
  assert.ok(g2 > L.generation);
});

test('ifAvailable: null when someone leads; timeout; a waiting campaign gets it next', async () => {
  const ws = uniq('ifa');
  const hold = deferred();
  const got = deferred();
  const first = a.leader(ws, (L) => { got.resolve(L.generation); return hold.promise; });
  const g1 = await got.promise;
  assert.equal(await b.leader(ws, { ifAvailable: true }, (L) => L), null);
  await assert.rejects(b.leader(ws, { timeout: 50 }, () => assert.fail('led')), TimeoutError);
  const second = b.leader(ws, (L) => L.generation);
  hold.resolve('first done');
  assert.equal(await first, 'first done');
  assert.ok(await second > g1);
});

test('steal: the old leader is told (signal, ABORTED, promise rejects); its commits are fenced', async () => {
  const ws = uniq('steal');
  const got = deferred();
  let old;
  const first = a.leader(ws, (L) => { old = L; got.resolve(); return new Promise((r) => L.signal.addEventListener('abort', r)); });
  const firstR = assert.rejects(first, (e) => e instanceof FencedError && e.reason === 'stolen');
  await got.promise;
  await b.leader(ws, { steal: true }, async (L) => {
    await firstR;
    assert.equal(old.state, LeaderState.RELEASED);
    assert.equal(old.signal.aborted, true);
    await assert.rejects(old.commit('x', 'k', 1), FencedError);
    assert.deepEqual(await L.commit('x', 'k', 1), { applied: true });
  });
});

test('lease renewed while the callback runs', async () => {
  const ws = uniq('renew');
  const r = await a.leader(ws, { lease: 500 }, async (L) => {
    await new Promise((ok) => setTimeout(ok, 1600));
    return [L.state, (await L.commit('late', 'k', 'v')).applied];
  });
  assert.deepEqual(r, [LeaderState.LEADER, true]);
});

test('disable fences the leader and refuses campaigns until enable; signal aborts a campaign', async () => {
  const ws = uniq('kill');
  const got = deferred();
  const first = a.leader(ws, (L) => { got.resolve(); return new Promise((r) => L.signal.addEventListener('abort', r)); });
  const firstR = assert.rejects(first, (e) => e instanceof FencedError && e.reason === 'disabled');
  await got.promise;
  const { generation } = await b.leaders.disable(ws);
  assert.ok(generation > 0);
  await firstR;
  assert.equal((await b.leaders.info(ws)).disabled, true);
  await assert.rejects(b.leader(ws, () => {}), (e) => e instanceof DisabledError && e.code === 'DISABLED');
  await b.leaders.enable(ws);
  assert.ok(await b.leader(ws, (L) => L.generation) > generation);

  const hold = deferred();
  const got2 = deferred();
  const h = a.leader(ws, () => { got2.resolve(); return hold.promise; });
  await got2.promise;
  const ac = new AbortController();
  const waiting = b.leader(ws, { signal: ac.signal }, () => assert.fail('led'));
  const waitingR = assert.rejects(waiting, { name: 'AbortError' });
  await b.ping();
  ac.abort();
  await waitingR;
  hold.resolve();
  await h;
});
