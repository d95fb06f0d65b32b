// What a misbehaving broker cannot do to this client: make it buffer more
// than the protocol's 64 MiB frame cap (a huge announced max_frame), hang a
// call forever (silence after hello: requestTimeoutMs), hold an unbounded
// backlog of events (a flood), pass frames nested deeper than the protocol
// allows or garbage, or put control bytes into error messages.  Also: a full
// broker (--max-conns) is reported as LIMIT, and the frame reader is linear.
// Fake brokers for the hostile cases, a real coordd for the full one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, ConnectError, CoordError, TimeoutError } from '../src/index.js';
import { FrameReader, PROTOCOL_MAX_FRAME } from '../src/wire.js';
import { EVENTS_PER_TURN } from '../src/connection.js';
import { startBroker } from '../testlib/broker.js';
import { fakeBroker, rawFrame, helloReply } from '../testlib/fake-broker.js';

const within = (p, ms, what) => Promise.race([p, new Promise((_, rej) =>
  setTimeout(() => rej(new Error(`${what}: not settled within ${ms} ms`)), ms).unref())]);
const MiB = 1024 * 1024;

// A fake broker: hello answered with helloExtra, then onRequest(peer, m).
async function fake(onRequest, helloExtra) {
  return fakeBroker(async (peer) => {
    await peer.hello(helloExtra);
    for (;;) {
      const m = await peer.next();
      if (!m) return;
      await onRequest(peer, m);
    }
  });
}
const open = (fb, o = {}) => connect({ socket: fb.socket, autostart: false, ...o });

test('an announced max_frame above the protocol\'s 64 MiB is refused at hello', async () => {
  for (const mf of [2 ** 32 - 1, PROTOCOL_MAX_FRAME + 1]) {
    const fb = await fake(() => {}, { max_frame: mf });
    await assert.rejects(within(open(fb), 5000, 'connect'),
      (e) => e instanceof ConnectError && /max_frame/.test(e.message) && /64 MiB/.test(e.message), String(mf));
    await fb.close();
  }
  const fb = await fake((peer, m) => peer.reply(m), { max_frame: PROTOCOL_MAX_FRAME });
  const c = await open(fb);
  assert.equal(c.info.maxFrame, PROTOCOL_MAX_FRAME);
  await c.ping();
  await c.close();
  await fb.close();
});

test('a frame longer than max_frame is refused from its length, before its body is buffered', async () => {
  const fb = await fake(async (peer, m) => {
    const h = Buffer.alloc(4);
    h.writeUInt32BE(3 * 1024 * MiB >>> 0 || 0xc0000000);    // announces 3 GiB
    await peer.write(h, Buffer.alloc(64 * 1024));
    void m;
  });
  const c = await open(fb);
  await assert.rejects(within(c.ping(), 5000, 'ping'),
    (e) => e instanceof CoordError && e.code === 'PROTOCOL' && /above max_frame/.test(e.message));
  await c.close();
  await fb.close();
});

test('garbage after hello fails the connection with PROTOCOL, not a crash', async () => {
  for (const junk of [Buffer.from([0, 0, 0, 3, 0xc1, 0xc1, 0xc1]), Buffer.from([0, 0, 0, 2, 0x92, 1]),
    Buffer.from([0, 0, 0, 0]), rawFrame(Uint8Array.of(0x81, 0xa1, 0x61)), rawFrame(Uint8Array.of(0x80, 0x00))]) {
    const fb = await fake((peer) => peer.write(junk));
    const c = await open(fb);
    await assert.rejects(within(c.ping(), 5000, 'ping'), (e) => e instanceof CoordError && e.code === 'PROTOCOL',
      junk.toString('hex'));
    await c.close();
    await fb.close();
  }
});

// {rid, ok: true, x: <v>} as bytes, with v given as MessagePack bytes.
const replyWith = (rid, v) => rawFrame(Uint8Array.of(0x83, 0xa3, 0x72, 0x69, 0x64, rid, 0xa2, 0x6f, 0x6b, 0xc3,
  0xa1, 0x78, ...v));
const nested = (n) => [...Array(n).fill(0x91), 0x01];     // n arrays, innermost holding 1

test('frames nested deeper than the protocol\'s 3 levels are refused (as libcoord does)', async () => {
  // depth 3 (reply map -> array -> entry map, or -> array -> array) is fine
  let fb = await fake((peer, m) => peer.write(m.op === 'ping' ? replyWith(m.rid, [0x91, 0x81, 0xa1, 0x61, 0x01]) : replyWith(m.rid, nested(2))));
  let c = await open(fb);
  await c.ping();
  await c.stats();
  await c.close();
  await fb.close();
  for (const [v, why] of [[nested(3), 'nesting too deep'], [nested(200), 'nesting too deep'],
    [[0x81, 0xa1, 0x61, 0x81, 0xa1, 0x62, 0x91, 0x01], 'nesting too deep'], [[0x81, 0x01, 0x02], 'map key is not a string']]) {
    fb = await fake((peer, m) => peer.write(replyWith(m.rid, v)));
    c = await open(fb);
    await assert.rejects(within(c.ping(), 5000, 'ping'),
      (e) => e instanceof CoordError && e.code === 'PROTOCOL' && e.message.includes(why), why);
    await c.close();
    await fb.close();
  }
});

test('silence after hello: a call that does not wait by design times out (requestTimeoutMs)', async () => {
  let acquired = 0;
  const fb = await fake(async (peer, m) => {
    // lock.acquire is answered late (a wait is not a timeout); nothing else is answered
    if (m.op === 'lock.acquire')
      setTimeout(() => peer.reply(m, { granted: true, lock: ++acquired, token: 1 }), 900);
  });
  const c = await open(fb, { requestTimeoutMs: 300 });
  const t0 = Date.now();
  await assert.rejects(c.ping(), (e) => e instanceof TimeoutError && e.code === 'TIMEOUT'
    && /ping: .*timed out after 0\.3 s/.test(e.message));
  assert.ok(Date.now() - t0 >= 290, 'not before the deadline');
  await assert.rejects(c.stats(), TimeoutError);
  await assert.rejects(c.records.get('k'), TimeoutError);
  // the lock waits 900 ms (three deadlines) and is granted; its release is
  // not answered: the request rejects with the timeout
  let ran = false;
  await assert.rejects(within(c.locks.request('l', () => { ran = true; }), 5000, 'lock'),
    (e) => e instanceof TimeoutError && /lock\.release/.test(e.message));
  assert.equal(ran, true);
  await c.close();
  await fb.close();
  await assert.rejects(open(fb, { requestTimeoutMs: -1 }), TypeError);
});

test('an event flood is read at most EVENTS_PER_TURN events a turn, all delivered in order', async () => {
  const N = 200000;
  const fb = await fake(async (peer, m) => {
    await peer.reply(m);
    if (m.op !== 'sub.subscribe') return;
    // N message events, 1 MiB per write
    const one = (i) => rawFrame(Uint8Array.of(0x84, 0xa2, 0x65, 0x76, 0xa7, ...Buffer.from('message'), 0xa7,
      ...Buffer.from('channel'), 0xa1, 0x66, 0xa4, ...Buffer.from('data'), 0xc4, 5, 0xce,
      (i >>> 24) & 255, (i >>> 16) & 255, (i >>> 8) & 255, i & 255, 0xa4, ...Buffer.from('conn'), 0x02));
    let batch = [];
    let bytes = 0;
    for (let i = 0; i < N; i++) {
      const f = one(i);
      batch.push(f);
      bytes += f.length;
      if (bytes >= MiB) { await peer.write(...batch); batch = []; bytes = 0; }
    }
    if (batch.length) await peer.write(...batch);
  });
  const c = await open(fb);
  const ch = new c.BroadcastChannel('f');
  let got = 0, inOrder = true;
  let last = 0, maxPerTurn = 0;
  const done = new Promise((resolve) => {
    ch.onmessage = (e) => {
      if (e.data !== got) inOrder = false;
      if (++got === N) resolve();
    };
  });
  let stop = false;
  const probe = () => {                 // deliveries between two turns of the loop
    maxPerTurn = Math.max(maxPerTurn, got - last);
    last = got;
    if (!stop) setImmediate(probe);
  };
  setImmediate(probe);
  await within(done, 60000, 'the flood');
  stop = true;
  assert.equal(inOrder, true);
  // a turn delivers what was read in it: at most EVENTS_PER_TURN, plus the
  // rest of the chunk that crossed it (64 KiB of 28-byte frames)
  assert.ok(maxPerTurn <= EVENTS_PER_TURN + 2400, `${maxPerTurn} events delivered in one turn`);
  ch.close();
  await c.close();
  await fb.close();
});

test('control bytes in the broker\'s error text are escaped in error messages', async () => {
  const fb = await fake((peer, m) => peer.fail(m, 'LIMIT\x07', 'too\x1b[2J many\r\nlines\u2028here'));
  const c = await open(fb);
  const e = await c.ping().catch((x) => x);
  assert.ok(e instanceof CoordError);
  assert.equal(e.code, 'LIMIT\\x07');
  assert.equal(e.message, 'too\\x1b[2J many\\x0d\\x0alines\\u2028here');
  assert.doesNotMatch(e.message + e.code, /[\x00-\x1f\x7f-\x9f]/);
  await c.close();
  await fb.close();
  // and in a connection-level refusal (rid 0)
  const fb2 = await fakeBroker(async (peer) => {
    const h = await peer.next();
    await peer.write({ rid: 0, ok: false, code: 'LIMIT', message: 'full\n\x1b]0;pwned\x07' });
    void h;
    peer.end();
  });
  await assert.rejects(open(fb2), (x) => x instanceof ConnectError && x.message.includes('full\\x0a\\x1b]0;pwned\\x07')
    && !/[\x00-\x1f]/.test(x.message));
  await fb2.close();
  void helloReply;
});

test('a full broker (--max-conns) is reported as LIMIT: too many connections', async () => {
  const b = await startBroker({ args: ['--max-conns', '1'] });
  const c = await connect({ socket: b.socket, autostart: false });
  for (let i = 0; i < 10; i++) {
    await assert.rejects(connect({ socket: b.socket, autostart: false }),
      (e) => e instanceof ConnectError && /LIMIT: too many connections/.test(e.message), `try ${i}`);
  }
  await c.close();
  await b.stop();
});

test('the frame reader is linear: a 16 MiB frame in 4 KiB chunks, frames split anywhere', () => {
  const r = new FrameReader(PROTOCOL_MAX_FRAME);
  const body = Buffer.alloc(16 * MiB, 7);
  const all = Buffer.concat([rawFrame(body), rawFrame(Buffer.from([0x80]))]);
  const t0 = process.hrtime.bigint();
  const out = [];
  for (let off = 0; off < all.length; off += 4096) out.push(...r.push(all.subarray(off, off + 4096)));
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  assert.equal(out.length, 2);
  assert.equal(out[0].length, 16 * MiB);
  assert.ok(out[0].every((x) => x === 7));
  assert.ok(s < 2, `${s.toFixed(2)} s for 16 MiB`);       // the quadratic reader took minutes
  assert.equal(r.buffered, 0);
  // every split of three small frames gives the same bodies
  const frames = [Buffer.from([0x81, 0xa1, 0x61, 1]), Buffer.from([0x80]), Buffer.from('x'.repeat(300))];
  const stream = Buffer.concat(frames.map(rawFrame));
  for (let a = 0; a <= stream.length; a += 3) {
    for (let b = a; b <= stream.length; b += 7) {
      const rr = new FrameReader();
      const got = [...rr.push(stream.subarray(0, a)), ...rr.push(stream.subarray(a, b)), ...rr.push(stream.subarray(b))];
      assert.deepEqual(got.map((x) => Buffer.from(x).toString('hex')), frames.map((x) => x.toString('hex')), `${a} ${b}`);
    }
  }
});
