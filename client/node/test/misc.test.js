// watch(), stats(), the error classes and the wire helpers (WTF-8, framing).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, CoordError, FencedError, WIRE_CODES, wtf8Encode, wtf8Decode } from '../src/index.js';
import { FrameReader, encodeFrame, decodeFrame, wireName } from '../src/wire.js';
import { startBroker } from '../testlib/broker.js';

test('watch: lifecycle events of -locks and -leaders as an async iterator', async () => {
  const b = await startBroker();
  const c = await connect({ socket: b.socket });
  const other = await connect({ socket: b.socket });
  const w = c.watch(['-locks', '-leaders']);
  await w.ready;
  const token = await other.locks.request('watched', (l) => l.token);
  await other.leader('wsw', () => {});
  const seen = [];
  for await (const ev of w) {
    seen.push(ev);
    if (ev.channel === '-leaders' && ev.what === 'resigned') break;
  }
  const locks = seen.filter((e) => e.channel === '-locks' && e.name === 'watched');
  assert.deepEqual(locks.map((e) => e.what), ['granted', 'released']);
  assert.equal(locks[0].token, token);
  assert.equal(locks[0].conn, other.info.conn);
  assert.ok(locks[0].atMs > 0);
  const leaders = seen.filter((e) => e.channel === '-leaders');
  assert.deepEqual(leaders.map((e) => e.what), ['elected', 'resigned']);
  assert.equal(leaders[0].workstream, 'wsw');
  // after break the subscription is gone; an aborted signal ends another
  const ac = new AbortController();
  const w2 = c.watch('-flights', { signal: ac.signal });
  await w2.ready;
  ac.abort(new Error('enough'));
  await assert.rejects(w2.next(), { message: 'enough' });
  await assert.rejects(async () => c.watch([]), TypeError);
  await c.close();
  await other.close();
  await b.stop();
});

test('stats: counters in camelCase', async () => {
  const b = await startBroker();
  const c = await connect({ socket: b.socket });
  await c.locks.request('s', () => {});
  const s = await c.stats();
  assert.ok(s.connections >= 1);
  assert.ok(s.requests['lock.acquire'] >= 1);
  assert.ok(s.limits.maxFrame > 0);
  assert.equal(typeof s.uptimeMs, 'number');
  await c.close();
  await b.stop();
});

test('errors: code, message, subclasses', () => {
  const e = CoordError.from('FENCED', 'too late');
  assert.ok(e instanceof FencedError && e instanceof CoordError && e instanceof Error);
  assert.equal(e.code, 'FENCED');
  assert.equal(e.message, 'too late');
  assert.equal(e.name, 'FencedError');
  const x = CoordError.from('STORAGE', 'disk');
  assert.equal(x.constructor, CoordError);
  assert.equal(x.code, 'STORAGE');
  assert.ok(WIRE_CODES.includes('NAME_RESERVED'));
});

test('WTF-8: lossless for every string, identical to UTF-8 when well-formed', () => {
  for (const s of ['', 'abc', 'é', '\u{1F600}', '\uD800', '\uDC00\uD800', 'a\uDBFFb', '\uD83D\uDE00\uD83D']) {
    assert.equal(wtf8Decode(wtf8Encode(s)), s);
    if (s.isWellFormed()) {
      assert.deepEqual(Buffer.from(wtf8Encode(s)), Buffer.from(s, 'utf8'));
      assert.equal(wireName(s), s);
    } else {
      assert.ok(wireName(s) instanceof Uint8Array);
    }
  }
  assert.equal(wtf8Decode(Uint8Array.from([0xff, 0x61])), '\uFFFDa');
});

test('frames: split and joined chunks, bad lengths, unsafe integers', () => {
  const f1 = encodeFrame({ rid: 1, ok: true, token: 2 ** 40 + 1 });
  const f2 = encodeFrame({ ev: 'x', name: 'n' });
  const all = Buffer.concat([f1, f2]);
  const r = new FrameReader();
  const got = [];
  for (let i = 0; i < all.length; i++) got.push(...r.push(all.subarray(i, i + 1)));
  assert.equal(got.length, 2);
  assert.deepEqual(decodeFrame(got[0]), { rid: 1, ok: true, token: 2 ** 40 + 1 });
  assert.deepEqual(decodeFrame(got[1]), { ev: 'x', name: 'n' });
  assert.throws(() => new FrameReader().push(Buffer.from([0, 0, 0, 0])), { code: 'PROTOCOL' });
  assert.throws(() => new FrameReader(10).push(Buffer.from([0, 0, 0, 11])), { code: 'PROTOCOL' });
  // uint64 2^53 + 2: not a safe integer
  const big = Buffer.from([0x81, 0xa1, 0x74, 0xcf, 0x00, 0x20, 0, 0, 0, 0, 0, 2]);
  assert.throws(() => decodeFrame(big), { code: 'PROTOCOL' });
  assert.throws(() => decodeFrame(Buffer.from([0x93, 1, 2, 3])), { code: 'PROTOCOL' });
});
