// Leadership's descriptors and policies against a real coordd: descriptors
// (define/describe, field-by-field merge), protocol pinning and its ratchet,
// steal policies, incident takeover, max hold drain and fence, rollout modes,
// history, outbox claims (reconcile after a leader process is killed),
// pending, check, drain.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import {
  connect, LeaderState, CoordError, FencedError, DisabledError, ProtocolPinnedError, PolicyError,
  ReadOnlyError, DrainingError,
} from '../src/index.js';
import { startBroker, deferred, PKG } from '../testlib/broker.js';

let broker, a, b, op;
let n = 0;
const uniq = (t) => `${t}-${++n}`;
before(async () => {
  broker = await startBroker();
  a = await connect({ socket: broker.socket, client: 'lead2-a' });
  b = await connect({ socket: broker.socket, client: 'lead2-b' });
  op = await connect({ socket: broker.socket, client: 'lead2-operator' });
});
after(async () => {
  await Promise.all([a.close(), b.close(), op.close()]);
  await broker.stop();
});

const code = (c) => (e) => e instanceof CoordError && e.code === c;
const eventOf = (target, type) => new Promise((r) => target.addEventListener(type, r, { once: true }));

// Leads ws on client c until released; resolves {L, done} once leading.
async function holdLeader(c, ws, options = {}) {
  const got = deferred();
  const release = deferred();
  const done = c.leader(ws, options, (L) => { got.resolve(L); return release.promise; });
  done.catch(() => {});
  const L = await Promise.race([got.promise, done.then(() => { throw new Error('not led'); })]);
  return { L, done, release: release.resolve };
}

test('generations are safe integers above 2^32 (epoch * 2^21 + counter)', async () => {
  const ws = uniq('ids');
  const g1 = await a.leader(ws, (L) => L.generation);
  const g2 = await a.leader(ws, (L) => L.generation);
  for (const g of [g1, g2]) {
    assert.equal(typeof g, 'number');
    assert.ok(Number.isSafeInteger(g) && g > 2 ** 32, `generation ${g}`);
  }
  assert.ok(g2 > g1);
  const { generation } = await a.leaders.disable(ws);
  assert.ok(Number.isSafeInteger(generation) && generation > g2);
  await a.leaders.enable(ws);
});

test('define / describe: defaults, field-by-field merge, null back to default, validation', async () => {
  const ws = uniq('define');
  assert.equal(await a.leaders.describe(ws), null);
  const before = Date.now();
  const d1 = await a.leaders.define(ws, { maxHold: 1000, steal: 'never', fallback: 'SERVER_COORDINATED', canonicalFence: 'local' });
  assert.equal(d1.workstream, ws);
  assert.equal(d1.maxHoldMs, 1000);
  assert.equal(d1.steal, 'never');
  assert.equal(d1.mode, 'active');
  assert.equal(d1.fallback, 'SERVER_COORDINATED');
  assert.equal(d1.canonicalFence, 'local');
  assert.equal(d1.protocol, null);
  assert.equal(d1.pinnedProtocol, null);
  assert.ok(d1.definedMs >= before - 1000 && d1.definedMs <= Date.now() + 1000, `definedMs ${d1.definedMs}`);
  assert.deepEqual(await b.leaders.describe(ws), d1);
  // a field left out (or undefined) keeps its value
  const d2 = await a.leaders.define(ws, { mode: 'shadow', steal: undefined });
  assert.deepEqual({ ...d2, definedMs: 0 }, { ...d1, mode: 'shadow', definedMs: 0 });
  // null: back to the default
  const d3 = await a.leaders.define(ws, { maxHold: null, fallback: null, steal: null, mode: null });
  assert.equal(d3.maxHoldMs, 0);
  assert.equal(d3.fallback, null);
  assert.equal(d3.steal, 'allowed');
  assert.equal(d3.mode, 'active');
  // a define never changes the generation
  const g = (await a.leaders.info(ws)).generation;
  await a.leaders.define(ws, { maxHold: 5000 });
  assert.equal((await a.leaders.info(ws)).generation, g);
  assert.equal((await a.leaders.info(ws)).maxHoldMs, 5000);
  // the broker's validation: INVALID_OPTIONS, nothing changed
  for (const bad of [{ steal: 'sometimes' }, { mode: 'passive' }, { canonicalFence: 'etcd' }, { protocol: 'no-version' },
    { protocol: 'app@0' }, { maxHold: 86_400_001 }, { fallback: '' }])
    await assert.rejects(a.leaders.define(ws, bad), code('INVALID_OPTIONS'), JSON.stringify(bad));
  assert.equal((await a.leaders.describe(ws)).maxHoldMs, 5000);
  // the client's: unknown fields and wrong types are TypeErrors
  await assert.rejects(a.leaders.define(ws, { max_hold_ms: 1 }), /unknown field max_hold_ms/);
  await assert.rejects(a.leaders.define(ws, { steal: true }), TypeError);
  await assert.rejects(a.leaders.define(ws, { force: 'yes' }), TypeError);
});

test('protocol pinning: refused campaigns, the ratchet, define below the pin needs force', async () => {
  const ws = uniq('pin');
  let d = await a.leaders.define(ws, { protocol: 'app@2' });
  assert.equal(d.protocol, 'app@2');
  assert.equal(d.pinnedProtocol, 'app@2');
  for (const protocol of [undefined, 'app@1', 'other@2'])
    await assert.rejects(a.leader(ws, { protocol }, () => assert.fail('led')),
      (e) => e instanceof ProtocolPinnedError && e.code === 'PROTOCOL_PINNED', String(protocol));
  await assert.rejects(a.leader(ws, { protocol: 'app' }, () => assert.fail('led')), code('INVALID_OPTIONS'));
  await assert.rejects(a.leader(ws, { protocol: 2 }, () => assert.fail('led')), TypeError);
  assert.ok(await a.leader(ws, { protocol: 'app@2' }, (L) => L.generation) > 0);
  // a campaign with a newer version raises the pin (ratchet)
  await a.leader(ws, { protocol: 'app@3' }, () => {});
  d = await b.leaders.describe(ws);
  assert.equal(d.protocol, 'app@2');
  assert.equal(d.pinnedProtocol, 'app@3');
  assert.equal((await b.leaders.info(ws)).pinnedProtocol, 'app@3');
  await assert.rejects(a.leader(ws, { protocol: 'app@2' }, () => {}), ProtocolPinnedError);
  // lowering the pin, another name, or removing the protocol: PROTOCOL_PINNED, nothing changed
  for (const protocol of ['app@2', 'other@9', null])
    await assert.rejects(b.leaders.define(ws, { protocol }), ProtocolPinnedError, String(protocol));
  assert.equal((await b.leaders.describe(ws)).pinnedProtocol, 'app@3');
  // force: the defined protocol becomes the pin, the ratchet forgotten
  d = await b.leaders.define(ws, { protocol: 'app@2', force: true });
  assert.equal(d.pinnedProtocol, 'app@2');
  assert.ok(await a.leader(ws, { protocol: 'app@2' }, (L) => L.generation) > 0);
  d = await b.leaders.define(ws, { protocol: null, force: true });
  assert.equal(d.pinnedProtocol, null);
  assert.ok(await a.leader(ws, () => true));
  // the history records the campaign's protocol
  const h = await b.leaders.history(ws);
  assert.deepEqual(h.slice(0, 4).map((t) => t.protocol ?? null), [null, 'app@2', 'app@3', 'app@2']);
});

test('a campaign waiting while a newer version raises the pin is refused when its turn comes', async () => {
  const ws = uniq('pinwait');
  await a.leaders.define(ws, { protocol: 'app@1' });
  const first = await holdLeader(a, ws, { protocol: 'app@5' });
  const old = b.leader(ws, { protocol: 'app@1' }, () => assert.fail('led'));
  const oldR = assert.rejects(old, ProtocolPinnedError);
  await b.ping();                   // answered after the campaign on its connection: it waits
  first.release();
  await first.done;
  await oldR;
});

test('steal policies: never, incident-only (loser: reason incident), allowed (loser: stolen)', async () => {
  const ws = uniq('policy');
  await a.leaders.define(ws, { steal: 'never' });
  let h = await holdLeader(a, ws);
  await assert.rejects(b.leader(ws, { steal: true }, () => assert.fail('led')), (e) => e instanceof PolicyError && e.code === 'POLICY');
  await assert.rejects(b.leader(ws, { steal: true, incident: 'INC-1' }, () => assert.fail('led')), PolicyError);
  assert.equal(h.L.state, LeaderState.LEADER);

  await a.leaders.define(ws, { steal: 'incident-only' });
  await assert.rejects(b.leader(ws, { steal: true }, () => assert.fail('led')), PolicyError);
  const lostR = assert.rejects(h.done, (e) => e instanceof FencedError && e.reason === 'incident' && e.incident === 'INC-2');
  const g = await b.leader(ws, { steal: true, incident: 'INC-2' }, async (L) => {
    await lostR;
    assert.equal(h.L.state, LeaderState.RELEASED);
    assert.equal(h.L.signal.aborted, true);
    assert.equal(h.L.signal.reason.reason, 'incident');
    const info = await op.leaders.info(ws);
    assert.equal(info.incident, 'INC-2');
    assert.equal(info.liveGeneration, L.generation);
    return L.generation;
  });
  const hist = await op.leaders.history(ws, { limit: 2 });
  assert.equal(hist[0].generation, g);
  assert.equal(hist[0].incident, 'INC-2');
  assert.equal(hist[0].reason, 'resigned');
  assert.equal(hist[1].generation, h.L.generation);
  assert.equal(hist[1].reason, 'incident');

  await a.leaders.define(ws, { steal: 'allowed' });
  h = await holdLeader(a, ws);
  const stolenR = assert.rejects(h.done, (e) => e instanceof FencedError && e.reason === 'stolen');
  await b.leader(ws, { steal: true }, () => stolenR);
});

test('incident takeover of a disabled workstream; an incident steal breaks the incident leader', async () => {
  const ws = uniq('incident');
  const h = await holdLeader(a, ws);
  const disabledR = assert.rejects(h.done, (e) => e instanceof FencedError && e.reason === 'disabled');
  await op.leaders.disable(ws);
  await disabledR;
  await assert.rejects(b.leader(ws, () => assert.fail('led')), DisabledError);
  // an incident campaign is granted while disabled
  const inc = await holdLeader(b, ws, { incident: 'INC-7 operator takeover' });
  let info = await op.leaders.info(ws);
  assert.equal(info.disabled, true);
  assert.equal(info.state, 'leading');
  assert.equal(info.incident, 'INC-7 operator takeover');
  assert.deepEqual(await inc.L.commit('fix-1', 'k', 'v'), { applied: true });
  // still disabled for campaigns without incident
  await assert.rejects(a.leader(ws, { steal: true }, () => assert.fail('led')), DisabledError);
  // another incident campaign steals it only with steal: true
  const lostR = assert.rejects(inc.done, (e) => e instanceof FencedError && e.reason === 'incident' && e.incident === 'INC-8');
  const sig = eventOf(inc.L.signal, 'abort');
  await a.leader(ws, { incident: 'INC-8', steal: true }, async () => {
    await sig;
    assert.equal(inc.L.signal.reason.reason, 'incident');
    await lostR;
    await assert.rejects(inc.L.commit('fix-2', 'k', 'w'), FencedError);
  });
  await op.leaders.enable(ws);
  info = await op.leaders.info(ws);
  assert.equal(info.disabled, false);
  assert.equal(info.state, 'idle');
});

test('max hold: leases capped, a waiting campaign drains the leader (drain event, DRAINING), then fences it', async () => {
  const ws = uniq('maxhold');
  await a.leaders.define(ws, { maxHold: 300 });
  const drained = deferred();
  const lead = a.leader(ws, { lease: 5000 }, async (L) => {
    assert.equal(L.leaseMs, 300);
    L.ondrain = (ev) => drained.resolve(ev.detail.reason);
    await new Promise((r) => L.signal.addEventListener('abort', r));
    return 'never';
  });
  const leadR = assert.rejects(lead, (e) => e instanceof FencedError && e.reason === 'max_hold');
  const next = b.leader(ws, () => 'next');
  assert.equal(await drained.promise, 'max_hold');
  await leadR;
  assert.equal(await next, 'next');
  const hist = await op.leaders.history(ws, { limit: 2 });
  assert.equal(hist[1].reason, 'max_hold');
  const st = await op.stats();
  assert.ok(st.termsReachedMaxHold >= 1 && st.termsFencedMaxHold >= 1 && st.termsOverMaxHold === 0,
    JSON.stringify([st.termsReachedMaxHold, st.termsFencedMaxHold, st.termsOverMaxHold]));
});

test('max hold with drainGrace: signal aborts (DrainingError), claims refused, commits accepted, resign hands over', async () => {
  const ws = uniq('grace');
  await a.leaders.define(ws, { maxHold: 300 });
  let fenced = null;
  const lead = a.leader(ws, { drainGrace: 50 }, async (L) => {
    const drain = eventOf(L, 'drain');
    await L.claim('before');
    const ev = await drain;
    assert.equal(ev.detail.reason, 'max_hold');
    assert.equal(L.state, LeaderState.DRAINING);
    assert.equal(L.drainReason, 'max_hold');
    assert.equal((await op.leaders.info(ws)).state, 'draining');
    await assert.rejects(L.claim('after'), (e) => e instanceof DrainingError && e.code === 'DRAINING');
    await new Promise((r) => L.signal.addEventListener('abort', r));
    fenced = L.signal.reason;
    assert.equal(L.state, LeaderState.DRAINING);        // still leading: the grace is ours
    assert.deepEqual(await L.commit('before', 'k', 1), { applied: true });
    assert.deepEqual(await L.commit('unclaimed'), { applied: true });
    return 'drained';
  });
  const next = b.leader(ws, (L) => L.generation);
  assert.equal(await lead, 'drained');
  assert.ok(fenced instanceof DrainingError && fenced.reason === 'max_hold');
  assert.ok(await next > 0);
  const hist = await op.leaders.history(ws, { limit: 2 });
  assert.equal(hist[1].reason, 'resigned');
});

test('rollout modes: shadow and read-only refuse writes (READ_ONLY); a mode change reaches the leader', async () => {
  const ws = uniq('modes');
  await op.leaders.define(ws, { mode: 'shadow' });
  const modes = [];
  await a.leader(ws, async (L) => {
    assert.equal(L.mode, 'shadow');
    assert.equal((await op.leaders.info(ws)).mode, 'shadow');
    await assert.rejects(L.commit('w1', 'k', 1), (e) => e instanceof ReadOnlyError && e.code === 'READ_ONLY');
    await assert.rejects(L.claim('w1'), ReadOnlyError);
    await assert.rejects(L.abandon('w1', 'no'), ReadOnlyError);
    L.onmode = (ev) => modes.push(ev.detail.mode);
    const g = L.generation;
    let ev = eventOf(L, 'mode');
    await op.leaders.define(ws, { mode: 'read-only' });
    await ev;
    assert.equal(L.mode, 'read-only');
    await assert.rejects(L.commit('w1', 'k', 1), ReadOnlyError);
    ev = eventOf(L, 'mode');
    await op.leaders.define(ws, { mode: 'active' });
    await ev;
    assert.equal(L.mode, 'active');
    assert.equal(L.generation, g);
    assert.deepEqual(await L.commit('w1', 'k', 1), { applied: true });
    assert.equal((await op.leaders.check(ws, g)).mode, 'active');
  });
  assert.deepEqual(modes, ['read-only', 'active']);
  const hist = await op.leaders.history(ws);
  assert.equal(hist[0].mode, 'shadow');
});

test('history: newest first, limit, live term, reasons', async () => {
  const ws = uniq('history');
  assert.deepEqual(await op.leaders.history(ws), []);
  const g1 = await a.leader(ws, (L) => L.generation);
  assert.equal((await op.leaders.history(ws))[0].reason, 'resigned');
  const h = await holdLeader(a, ws, { protocol: 'hist@1' });
  let hist = await op.leaders.history(ws);
  assert.equal(hist.length, 2);
  assert.deepEqual(hist.map((t) => t.generation), [h.L.generation, g1]);
  assert.equal(hist[0].endedMs, 0);
  assert.equal(hist[0].reason, undefined);
  assert.equal(hist[0].protocol, 'hist@1');
  assert.equal(hist[0].client, 'lead2-a');
  assert.equal(hist[0].pid, process.pid);
  assert.equal(typeof hist[0].instance, 'string');
  assert.ok(hist[0].electedMs > 0);
  assert.equal(hist[1].reason, 'resigned');
  assert.ok(hist[1].endedMs >= hist[1].electedMs);
  const stolenR = assert.rejects(h.done, FencedError);
  await b.leader(ws, { steal: true }, () => stolenR);
  hist = await op.leaders.history(ws, { limit: 2 });
  assert.equal(hist.length, 2);
  assert.equal(hist[0].client, 'lead2-b');
  assert.equal(hist[1].reason, 'stolen');
  await assert.rejects(op.leaders.history(ws, { limit: -1 }), TypeError);
});

test('claims: reconcile after the claiming leader process is killed; pending; abandon; applied', async () => {
  const ws = uniq('claims');
  const child = spawn(process.execPath, ['testlib/leader-child.js', broker.socket, ws, 'send-email-42'],
    { cwd: PKG, stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => { out += d; if (out.includes('\n')) resolve(out); });
    child.once('exit', (c) => reject(new Error(`child exited ${c}: ${out}`)));
  });
  const childGen = Number(/^claimed (\d+)/.exec(line)[1]);
  let pend = await op.leaders.pending(ws);
  assert.deepEqual(pend.map((p) => [p.opId, p.generation, p.live]), [['send-email-42', childGen, true]]);
  const claimedMs = pend[0].claimedMs;
  // the campaign waits for the child; killing it ends its term
  const lead = a.leader(ws, async (L) => {
    let p = await L.pending();
    assert.deepEqual(p.map((x) => [x.opId, x.generation, x.live]), [['send-email-42', childGen, false]]);
    const r = await L.claim('send-email-42');
    assert.deepEqual(r, { claimed: true, reconcile: true, applied: false, abandoned: false, previousGeneration: childGen, claimedMs });
    // the claim is now ours, in its place
    p = await L.pending();
    assert.deepEqual(p.map((x) => [x.opId, x.generation, x.live]), [['send-email-42', L.generation, true]]);
    assert.ok(p[0].claimedMs >= claimedMs);   // now the new claim's time
    assert.deepEqual(await L.claim('send-email-42'), { claimed: true, reconcile: false, applied: false, abandoned: false });
    assert.deepEqual(await L.commit('send-email-42'), { applied: true });
    assert.deepEqual(await L.claim('send-email-42'), { claimed: false, reconcile: false, applied: true, abandoned: false, generation: L.generation });
    // abandon: claimed or not; an applied op is not abandoned
    assert.deepEqual(await L.claim('refund-7'), { claimed: true, reconcile: false, applied: false, abandoned: false });
    assert.deepEqual(await L.abandon('refund-7', 'customer cancelled'), { abandoned: true, applied: false });
    assert.deepEqual(await L.abandon('never-claimed', 'not needed'), { abandoned: true, applied: false });
    assert.deepEqual(await L.claim('refund-7'), { claimed: false, reconcile: false, applied: false, abandoned: true });
    assert.deepEqual(await L.commit('refund-7', 'k', 1), { applied: false, abandoned: true });
    assert.deepEqual(await L.abandon('send-email-42', 'late'), { abandoned: false, applied: true, generation: L.generation });
    await assert.rejects(L.abandon('x', ''), code('INVALID_OPTIONS'));
    assert.deepEqual(await L.pending(), []);
    return L.generation;
  });
  child.kill('SIGKILL');
  const g = await lead;
  assert.ok(g > childGen);
  pend = await op.leaders.pending(ws);
  assert.deepEqual(pend, []);
  const st = await op.stats();
  assert.ok(st.claimsReconciled >= 1 && st.abandons >= 2);
});

test('claims from a stale generation are fenced; pending limit', async () => {
  const ws = uniq('claims2');
  let old;
  await a.leader(ws, async (L) => {
    old = L;
    for (let i = 0; i < 5; i++) await L.claim(`op-${i}`);
    const p = await op.leaders.pending(ws, { limit: 2 });
    assert.deepEqual(p.map((x) => x.opId), ['op-0', 'op-1']);
    assert.equal(p.truncated, true);
    assert.equal((await op.leaders.pending(ws, { limit: 5 })).truncated, undefined);
  });
  await assert.rejects(old.claim('op-9'), FencedError);
  await assert.rejects(old.abandon('op-0', 'x'), FencedError);
  assert.deepEqual((await op.leaders.pending(ws)).map((x) => [x.opId, x.live]),
    [0, 1, 2, 3, 4].map((i) => [`op-${i}`, false]));
});

test('check from elsewhere: live with lease left and mode, then not live', async () => {
  const ws = uniq('check');
  const h = await holdLeader(a, ws, { lease: 5000 });
  const c = await op.leaders.check(ws, h.L.generation);
  assert.equal(c.live, true);
  assert.equal(c.mode, 'active');
  assert.ok(c.leaseLeftMs > 0 && c.leaseLeftMs <= 5000);
  assert.deepEqual(await op.leaders.check(ws, h.L.generation - 1), { live: false });
  h.release();
  await h.done;
  assert.deepEqual(await op.leaders.check(ws, h.L.generation), { live: false });
  await assert.rejects(op.leaders.check(ws, -1), TypeError);
});

test('drain: self (claims refused, commits accepted) and requested by another connection (drain event)', async () => {
  const ws = uniq('drain');
  await a.leader(ws, async (L) => {
    await L.claim('c1');
    await L.drain();
    assert.equal(L.state, LeaderState.DRAINING);
    assert.equal(L.drainReason, 'self');
    const info = await op.leaders.info(ws);
    assert.equal(info.state, 'draining');
    assert.equal(info.drainReason, 'self');
    await L.drain();                          // twice is fine
    await assert.rejects(L.claim('c2'), DrainingError);
    assert.deepEqual(await L.commit('c1', 'k', 1), { applied: true });
    assert.equal(L.signal.aborted, false);    // no grace on a self drain
  });
  const h = await holdLeader(a, ws, { drainGrace: 20 });
  const ev = eventOf(h.L, 'drain');
  await op.leaders.drain(ws, h.L.generation);
  assert.equal((await ev).detail.reason, 'requested');
  assert.equal(h.L.state, LeaderState.DRAINING);
  await eventOf(h.L.signal, 'abort');
  assert.ok(h.L.signal.reason instanceof DrainingError);
  assert.equal(h.L.signal.reason.reason, 'requested');
  assert.equal((await op.leaders.info(ws)).drainReason, 'requested');
  h.release();
  await h.done;
  assert.equal(h.L.state, LeaderState.RELEASED);
  await assert.rejects(op.leaders.drain(ws, h.L.generation), FencedError);
});

test('info carries the new fields', async () => {
  const ws = uniq('info');
  await op.leaders.define(ws, { protocol: 'info@1', maxHold: 60000 });
  const h = await holdLeader(a, ws, { protocol: 'info@1', lease: 4000 });
  const i = await op.leaders.info(ws);
  assert.equal(i.state, 'leading');
  assert.equal(i.mode, 'active');
  assert.equal(i.disabled, false);
  assert.equal(i.pinnedProtocol, 'info@1');
  assert.equal(i.maxHoldMs, 60000);
  assert.equal(i.liveGeneration, h.L.generation);
  assert.equal(i.protocol, 'info@1');
  assert.equal(i.client, 'lead2-a');
  assert.equal(i.pid, process.pid);
  assert.ok(i.leaseLeftMs > 0 && i.leaseLeftMs <= 4000);
  assert.ok(i.leadingMs >= 0);
  h.release();
  await h.done;
});
