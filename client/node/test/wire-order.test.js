// Wire order: a reply and an event about what it made, read together (one
// socket read), are handled in that order, so the event is never dropped for
// want of the state it names.  Fake-broker tests write the two frames in ONE
// write (deterministic); real-broker tests get them into one read by keeping
// this process's event loop busy while the broker sends both (a lease or an
// owner ttl of 1 ms, or a steal made from another process meanwhile).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { connect, FencedError } from '../src/index.js';
import { startBroker, COORDCTL } from '../testlib/broker.js';
import { fakeBroker } from '../testlib/fake-broker.js';

const within = (p, ms, what) => Promise.race([p, new Promise((_, rej) =>
  setTimeout(() => rej(new Error(`${what}: not settled within ${ms} ms`)), ms).unref())]);
const busy = (ms) => { const end = Date.now() + ms; while (Date.now() < end); };
// Runs f after the request just made was written, with no socket read in
// between: microtasks run before any I/O, and the request is written a few
// microtasks after the call (50 is far more than it takes).
async function afterWrite(f) {
  for (let k = 0; k < 50; k++) await null;
  return f();
}

let broker, c;
before(async () => {
  broker = await startBroker();
  c = await connect({ socket: broker.socket, autostart: false, client: 'wire-order' });
});
after(async () => {
  await c.close();
  await broker.stop();
});

// A fake broker that answers hello, then gives fn each request after it.
async function scripted(fn) {
  const fb = await fakeBroker(async (peer) => {
    await peer.hello();
    for (;;) {
      const m = await peer.next();
      if (!m) return;
      await fn(peer, m);
    }
  });
  const client = await connect({ socket: fb.socket, autostart: false });
  return { fb, client, async close() { await client.close(); await fb.close(); } };
}

test('fake broker: a grant and its lock.lost in one write reject the request; the callback never runs', async () => {
  const s = await scripted(async (peer, m) => {
    if (m.op === 'lock.acquire')
      await peer.write({ rid: m.rid, ok: true, granted: true, lock: 7, token: 1 << 40 },
        { ev: 'lock.lost', lock: 7, name: m.name, reason: 'stolen', token: 1 << 40 });
    else await peer.reply(m);
  });
  let ran = false;
  await assert.rejects(within(s.client.locks.request('x', () => { ran = true; }), 3000, 'the holder'),
    (e) => e instanceof DOMException && e.name === 'AbortError' && /was stolen/.test(e.message));
  assert.equal(ran, false, 'the callback of a lock lost with its grant');
  await s.close();
});

test('fake broker: a loss while the callback runs aborts lock.signal and rejects the request', async () => {
  const s = await scripted(async (peer, m) => {
    if (m.op === 'lock.acquire') await peer.reply(m, { granted: true, lock: 9, token: 5 });
    else if (m.op === 'ping')        // the callback's ping: the loss, then the pong
      await peer.write({ ev: 'lock.lost', lock: 9, name: 'y', reason: 'expired', token: 5 }, { rid: m.rid, ok: true });
    else await peer.reply(m);
  });
  let signal;
  const p = s.client.locks.request('y', async (l) => {
    signal = l.signal;
    assert.equal(signal.aborted, false);
    await s.client.ping();
    return new Promise(() => {});
  });
  await assert.rejects(within(p, 3000, 'the holder'), { name: 'AbortError' });
  assert.equal(signal.aborted, true);
  assert.equal(signal.reason.name, 'AbortError');
  await s.close();
});

test('fake broker: an owner reply and its flight.abort in one write abort the owner\'s signal', async () => {
  const s = await scripted(async (peer, m) => {
    if (m.op === 'flight.join')
      await peer.write({ rid: m.rid, ok: true, role: 'owner', flight: 3, fence: 11 },
        { ev: 'flight.abort', flight: 3, reason: 'deadline', fence: 11 });
    else await peer.reply(m);
  });
  const j = await within(s.client.flight.join('k'), 3000, 'join');
  assert.equal(j.role, 'owner');
  assert.equal(j.signal.aborted, true, 'flight.abort behind the owner reply');
  assert.ok(j.signal.reason instanceof FencedError);
  assert.equal(j.signal.reason.reason, 'deadline');
  await s.close();
});

test('fake broker: a leadership grant with leader.mode, leader.drain and leader.lost in one write', async () => {
  const s = await scripted(async (peer, m) => {
    if (m.op === 'leader.campaign')
      await peer.write({ rid: m.rid, ok: true, granted: true, generation: 4, lease_ms: 30000, mode: 'active' },
        { ev: 'leader.mode', workstream: m.workstream, generation: 4, mode: 'shadow' },
        { ev: 'leader.drain', workstream: m.workstream, generation: 4, reason: 'max_hold' },
        { ev: 'leader.lost', workstream: m.workstream, generation: 4, reason: 'stolen' });
    else await peer.reply(m);
  });
  const seen = [];
  let sig;
  const p = s.client.leader('ws', (L) => {
    sig = L.signal;
    L.addEventListener('mode', (e) => seen.push(`mode ${e.detail.mode}`));
    L.addEventListener('drain', (e) => seen.push(`drain ${e.detail.reason}`));
    return new Promise(() => {});
  });
  await assert.rejects(within(p, 3000, 'the leader'), (e) => e instanceof FencedError && e.reason === 'stolen');
  assert.deepEqual(seen, ['mode shadow', 'drain max_hold']);
  assert.equal(sig.aborted, true);
  await s.close();
});

test('fake broker: a message right behind the subscribe reply is delivered', async () => {
  const s = await scripted(async (peer, m) => {
    if (m.op === 'sub.subscribe')
      await peer.write({ rid: m.rid, ok: true }, { ev: 'message', channel: m.channel, data: Uint8Array.of(0xa2, 0x68, 0x69), conn: 2 });
    else await peer.reply(m);
  });
  const ch = new s.client.BroadcastChannel('news');
  const got = await within(new Promise((r) => { ch.onmessage = (e) => r(e.data); }), 3000, 'the message');
  assert.equal(got, 'hi');
  ch.close();
  await s.close();
});

test('real broker: a lease of 1 ms expiring before the grant is read rejects the holder', async () => {
  // Another process waits for the lock behind us; while it does, this
  // process does not read: once it has the lock, our lease has expired and
  // our grant and its lock.lost are both waiting to be read.  When that
  // process was granted first (its request overtook ours: its token is the
  // smaller), the round proves nothing and is done again.
  let proved = 0;
  for (let i = 0; i < 20 && proved < 3; i++) {
    let mine = null;
    const p = c.locks.request(`lease1-${i}`, { lease: 1 }, (l) => { mine = l.token; return new Promise(() => {}); });
    p.catch(() => {});
    const r = await afterWrite(() => {
      busy(50);                           // the broker grants our request first
      return spawnSync(COORDCTL, ['--socket', broker.socket, 'lock', '-w', '10', `lease1-${i}`, '--', 'sh', '-c',
        'echo $COORD_LOCK_TOKEN'], { encoding: 'utf8' });
    });
    assert.equal(r.status, 0, r.stderr);
    await assert.rejects(within(p, 5000, 'the holder'), (e) => e.name === 'AbortError' && e.message === `the lease of lock 'lease1-${i}' expired`);
    if (mine !== null && Number(r.stdout.trim()) < mine) continue;     // the other one came first
    assert.equal(mine, null, 'the callback of a lock lost with its grant');
    proved++;
  }
  assert.ok(proved >= 3, `only ${proved} rounds had the grant and the loss in one read`);
});

test('real broker: a steal right after the grant (another process) rejects the holder', async () => {
  for (let i = 0; i < 5; i++) {
    const name = `stolen-${i}`;
    const p = c.locks.request(name, () => new Promise(() => {}));
    p.catch(() => {});
    // this process does not read while coordctl steals the lock just granted
    const r = await afterWrite(() => {
      busy(30);                           // the broker grants our request first
      return spawnSync(COORDCTL, ['--socket', broker.socket, 'lock', '--steal', name, '--', 'true'], { encoding: 'utf8' });
    });
    assert.equal(r.status, 0, r.stderr);
    await assert.rejects(within(p, 5000, 'the holder'), (e) => e.name === 'AbortError' && /was stolen/.test(e.message));
  }
});

test('real broker: an owner ttl of 1 ms passing before the owner reply is read aborts its signal', async () => {
  for (let i = 0; i < 5; i++) {
    const jp = c.flight.join(`ttl1-${i}`, { ttl: 1 });
    jp.catch(() => {});
    await afterWrite(() => busy(100));
    const j = await within(jp, 5000, 'join');
    assert.equal(j.role, 'owner');
    assert.equal(j.signal.aborted, true);
    assert.equal(j.signal.reason.reason, 'deadline');
    await assert.rejects(c.flight.complete(j.flight, j.fence, new Uint8Array(1)), FencedError);
  }
});
