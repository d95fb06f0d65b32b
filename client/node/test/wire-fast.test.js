// The hot path of wire.js: encodeRequest writes flat requests without the
// codec and decodeFrame reads flat replies in one pass (decodeFlat).  Both
// must give what the codec path gives, byte for byte and value for value,
// at every boundary of MessagePack's int and str forms, and hand anything
// else to the codec (or to its checks: a bad frame is refused the same way).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeFrame, encodeRequest, decodeFrame } from '../src/wire.js';

const VALUES = ['', 'a', 'x'.repeat(31), 'x'.repeat(32), 'y'.repeat(255), 'z'.repeat(256),
  'w'.repeat(65535), 'v'.repeat(65536), 'é', 'a\ud800', '\u{1f600}',
  0, 1, 127, 128, 255, 256, 65535, 65536, 2 ** 32 - 1, 2 ** 32, 2 ** 53 - 1,
  -1, -32, -33, -128, -129, -32768, -32769, -(2 ** 31), -(2 ** 31) - 1, -(2 ** 53 - 1),
  0.5, -0, NaN, Infinity, true, false, null, undefined,
  new Uint8Array([1, 2]), [1, 2], { a: 1 }];

test('encodeRequest: the bytes encodeFrame({op, rid, ...fields}) gives', () => {
  for (const v of VALUES) {
    for (const op of ['lock.acquire', 'o'.repeat(40)]) {
      for (const rid of [1, 200, 70000, 2 ** 32 + 5]) {
        const fields = { name: 'n', v, z: 3 };
        assert.deepEqual(encodeRequest(op, rid, fields), encodeFrame({ op, rid, ...fields }),
          `op ${op} rid ${rid} value ${String(v)}`);
      }
    }
  }
  const many = {};
  for (let i = 0; i < 20; i++) many[`k${i}`] = i;        // map16
  assert.deepEqual(encodeRequest('o', 1, many), encodeFrame({ op: 'o', rid: 1, ...many }));
  // a field named op or rid overrides as the spread does
  assert.deepEqual(encodeRequest('o', 1, { rid: 5, a: 1 }), encodeFrame({ op: 'o', rid: 1, rid: 5, a: 1 }));
  assert.deepEqual(encodeRequest('o', 1, {}), encodeFrame({ op: 'o', rid: 1 }));
});

// the same body through the one-pass reader (a Buffer) and the codec path
// (a plain Uint8Array, which decodeFrame never reads in one pass)
function both(body) {
  const out = [];
  for (const b of [Buffer.from(body), new Uint8Array(body)]) {
    try {
      out.push({ v: decodeFrame(b) });
    } catch (e) {
      out.push({ err: `${e.code}: ${e.message}` });
    }
  }
  return out;
}

test('decodeFrame: flat replies read in one pass give what the codec path gives', () => {
  for (const v of VALUES) {
    for (const m of [{ rid: 7, ok: true, v }, { rid: 7, ok: true, v, result: 'abc' },
      { ev: 'x', v, data: new Uint8Array([9]) }, { rid: 300, ok: false, code: 'BUSY', v }]) {
      const body = encodeFrame(m).subarray(4);
      const [fast, slow] = both(body);
      assert.deepEqual(fast, slow, `value ${String(v)}`);
    }
  }
  // uint64 / int64 beyond 2^53, float32, duplicate keys, __proto__, bad frames
  const raw = [
    [0x81, 0xa1, 0x61, 0xcf, 0, 0x20, 0, 0, 0, 0, 0, 1],
    [0x81, 0xa1, 0x61, 0xd3, 0xff, 0xd0, 0, 0, 0, 0, 0, 1],
    [0x81, 0xa1, 0x61, 0xca, 0x3f, 0x80, 0, 0],
    [0x82, 0xa1, 0x61, 1, 0xa1, 0x61, 2],
    [0x81, 0xa9, ...Buffer.from('__proto__'), 1],
    [0x81, 0x01, 0x02],
    [0x82, 0xa1, 0x61, 1],
    [0x81, 0xa1, 0x61, 1, 0xc0],
    [0x81, 0xa1, 0x61, 0xd9],
    [0x81, 0xa1, 0x61, 0xa5, 0x61],
    [0x81, 0xa2, 0xc3, 0xa9, 1],
    [0x81, 0xa1, 0x61, 0xa2, 0xed, 0xa0],
    [0xde, 0, 1, 0xa1, 0x61, 0xc3],
    [0xc0],
  ];
  for (const r of raw) {
    const [fast, slow] = both(Uint8Array.from(r));
    assert.deepEqual(fast, slow, `frame ${Buffer.from(r).toString('hex')}`);
  }
});
