// Results by reference, the client's side against a scripted broker (what a
// real broker does only when something breaks): a result_ref is opened,
// checked by inode and released (flight.unref) at once; the caller gets a
// Buffer by default or, with ref: true, a ResultRef to stream; a reference
// whose path is another file (or gone) is a GONE error; hello says no fds.
// The same through a real broker: result-ref-broker.test.js.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { connect, ResultRef, CoordError } from '../src/index.js';
import { fakeBroker } from '../testlib/fake-broker.js';
import { tempDir } from '../testlib/broker.js';

const PAYLOAD = Buffer.alloc(3 << 20);
for (let i = 0; i < PAYLOAD.length; i++) PAYLOAD[i] = (i * 7) & 0xff;

function resultFile(bytes = PAYLOAD) {
  const p = path.join(tempDir('coord-ref-'), 'result');
  fs.writeFileSync(p, bytes);
  return { path: p, ino: fs.statSync(p).ino, size: bytes.length };
}

// A broker that answers flight.join and record.get with a result by
// reference to file (ref numbers from 100), and records the unrefs.
function byRef(file, unrefs, hellos = []) {
  return async (peer) => {
    hellos.push(await peer.hello({ max_ref_bytes: 1 << 30, fds: true }));
    let n = 100;
    for (;;) {
      const m = await peer.next();
      if (!m) return;
      const result_ref = { ...file, ref: n };
      if (m.op === 'flight.join' || m.op === 'record.get') n++;
      if (m.op === 'flight.join')
        await peer.reply(m, { role: 'result', fence: 3, age_ms: 1, source: 'live', result_ref });
      else if (m.op === 'record.get')
        await peer.reply(m, { status: 'completed', fence: 3, created_ms: 1, expires_ms: 2, result_ref });
      else if (m.op === 'flight.unref') {
        unrefs.push(m.ref);
        await peer.reply(m, { released: true });
      } else await peer.reply(m);
    }
  };
}

test('a result by reference is read into a Buffer and released at once', async () => {
  const file = resultFile();
  const unrefs = [];
  const hellos = [];
  const fb = await fakeBroker(byRef(file, unrefs, hellos));
  const c = await connect({ socket: fb.socket, autostart: false });
  try {
    assert.equal(hellos[0].fds, undefined);            // Node cannot receive descriptors
    assert.equal(c.info.maxRefBytes, 1 << 30);
    const j = await c.flight.join('k');
    assert.equal(j.role, 'result');
    assert.ok(Buffer.isBuffer(j.result) && j.result.equals(PAYLOAD));
    assert.equal(j.resultRef, undefined);
    const r = await c.records.get('k', { raw: true });
    assert.ok(r.result.equals(PAYLOAD) && r.value.equals(PAYLOAD));
    const o = await c.once('k', () => assert.fail('not the owner'), { raw: true });
    assert.ok(o.value.equals(PAYLOAD));
    await c.ping();                                      // the unrefs went before it
    assert.deepEqual(unrefs, [100, 101, 102]);
  } finally {
    c.close();
    await fb.close();
  }
});

test('with ref: true the caller gets a ResultRef to stream or read, and closes it', async () => {
  const file = resultFile();
  const unrefs = [];
  const fb = await fakeBroker(byRef(file, unrefs));
  const c = await connect({ socket: fb.socket, autostart: false });
  try {
    const j = await c.flight.join('k', { ref: true });
    assert.equal(j.result, undefined);
    const ref = j.resultRef;
    assert.ok(ref instanceof ResultRef && ref.size === PAYLOAD.length && !ref.closed);
    assert.ok((await ref.buffer()).equals(PAYLOAD));
    const parts = [];
    let biggest = 0;
    for await (const chunk of ref.stream({ highWaterMark: 256 << 10 })) {
      parts.push(chunk);
      biggest = Math.max(biggest, chunk.length);
    }
    assert.ok(Buffer.concat(parts).equals(PAYLOAD));
    assert.ok(biggest <= 256 << 10, `${biggest}`);      // never one Buffer of the whole
    assert.ok(ref.closed);                               // the stream had the file and closed it
    await ref.close();                                   // again: nothing
    const r = await c.records.get('k', { ref: true });
    assert.equal(r.value, undefined);
    const rr = r.resultRef;
    const b = Buffer.alloc(4);
    await rr.handle.read(b, 0, 4, 8);
    assert.ok(b.equals(PAYLOAD.subarray(8, 12)));
    await rr[Symbol.asyncDispose]();                     // what `await using` calls
    assert.ok(r.resultRef.closed);
    assert.throws(() => r.resultRef.handle, /closed/);
    await c.ping();
    assert.deepEqual(unrefs, [100, 101]);
  } finally {
    c.close();
    await fb.close();
  }
});

test('a reference whose path is gone or another file is GONE, and still released', async () => {
  const file = resultFile();
  const unrefs = [];
  const other = resultFile(Buffer.from('other'));
  const fb = await fakeBroker(byRef({ ...file, path: other.path }, unrefs));
  const c = await connect({ socket: fb.socket, autostart: false });
  try {
    await assert.rejects(c.flight.join('k'), (e) => e instanceof CoordError && e.code === 'GONE'
      && /inode/.test(e.message));
    fs.rmSync(other.path);
    await assert.rejects(c.records.get('k'), (e) => e.code === 'GONE' && /ENOENT/.test(e.message));
    await c.ping();
    assert.deepEqual(unrefs, [100, 101]);
  } finally {
    c.close();
    await fb.close();
  }
});

test('an abort while the result is read rejects and closes the file', async () => {
  const file = resultFile();
  const fb = await fakeBroker(byRef(file, []));
  const c = await connect({ socket: fb.socket, autostart: false });
  try {
    const ac = new AbortController();
    const ref = await c.flight.join('k', { ref: true });
    ac.abort();
    await assert.rejects(ref.resultRef.buffer({ signal: ac.signal }), { name: 'AbortError' });
    await ref.resultRef.close();
  } finally {
    c.close();
    await fb.close();
  }
});
