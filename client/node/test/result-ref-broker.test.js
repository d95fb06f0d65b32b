// Results by reference through a real coordd: a Python owner completes with
// a sealed memfd (the Python client's complete_fd), and a C one (coordctl
// once, whose output is larger than a frame), Node followers waiting on
// the flight get the bytes as a Buffer and as a stream (Node receives no
// descriptors: result_ref, opened by path and checked by inode), the kept
// record by reference is read and listed by Node, and every reference is
// released (flight.unref): more record reads on one connection than the
// broker lets a connection hold (LIMIT_CONN_REFS, 1024) all succeed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { connect } from '../src/index.js';
import { startBroker, PKG, COORDCTL } from '../testlib/broker.js';

const PYTHON = '/usr/bin/python3';
const SIZE = 8 << 20;
// the broker's limit of result_ref held per connection (coord-wire-limits.h)
const LIMIT_CONN_REFS = 1024;

let broker, c;
before(async () => {
  broker = await startBroker();
  c = await connect({ socket: broker.socket, autostart: false });
});
after(async () => {
  await c.close();
  await broker.stop();
});

// A Python owner of key: prints "owner <sha256>" once it owns the flight,
// completes by reference (keep 60 s) when it reads a line, prints
// "delivered N", exits.
function pythonOwner(key) {
  const script = `
import hashlib, os, sys, coord
data = os.urandom(${SIZE})
with coord.Client(sys.argv[1], autostart=False) as c:
    f = c.flight.join(sys.argv[2])
    assert f.role == "owner", f.role
    print("owner", hashlib.sha256(data).hexdigest(), flush=True)
    sys.stdin.readline()
    fd = coord.sealed_memfd(data)
    print("delivered", f.complete_fd(fd, keep=60), flush=True)
    os.close(fd)
`;
  const env = { ...process.env, PYTHONPATH: path.join(PKG, '..', 'python', 'src'), PYTHONDONTWRITEBYTECODE: '1' };
  const p = spawn(PYTHON, ['-c', script, broker.socket, key], { stdio: ['pipe', 'pipe', 'inherit'], env });
  let out = '';
  const lines = [];
  const waiters = [];
  p.stdout.on('data', (d) => {
    out += d;
    let i;
    while ((i = out.indexOf('\n')) >= 0) {
      lines.push(out.slice(0, i));
      out = out.slice(i + 1);
      waiters.splice(0).forEach((w) => w());
    }
  });
  const line = async () => {
    while (!lines.length) {
      if (p.exitCode !== null) throw new Error(`python owner exited ${p.exitCode}`);
      await new Promise((r) => { waiters.push(r); p.once('exit', r); });
    }
    return lines.shift();
  };
  return { p, line };
}

async function followers(key, count) {
  const w = c.watch(['-flights']);
  await w.ready;
  const has = async () => ((await c.flight.list()).find((f) => f.key === key)?.followers ?? -1) >= count;
  if (!(await has())) for await (const ev of w) if (ev.key === key && await has()) break;
  await w.return();
}

const sha = (b) => createHash('sha256').update(b).digest('hex');

test('a Python owner completes by memfd; Node followers read it as a Buffer and as a stream', async () => {
  const key = 'by-ref';
  const owner = pythonOwner(key);
  const [, hash] = (await owner.line()).split(' ');
  const asBuffer = c.flight.join(key, { wait: 20000 });
  const other = await connect({ socket: broker.socket, autostart: false });
  try {
    const asRef = other.flight.join(key, { wait: 20000, ref: true });
    await followers(key, 2);
    owner.p.stdin.write('go\n');
    assert.equal(await owner.line(), 'delivered 2');

    const j = await asBuffer;
    assert.equal(j.role, 'result');
    assert.equal(j.result.length, SIZE);
    assert.equal(sha(j.result), hash);

    const k = await asRef;
    assert.equal(k.result, undefined);
    assert.equal(k.resultRef.size, SIZE);
    const h = createHash('sha256');
    let chunks = 0;
    for await (const chunk of k.resultRef.stream()) {
      h.update(chunk);
      chunks++;
    }
    assert.equal(h.digest('hex'), hash);
    assert.ok(chunks > 1, `${chunks}`);                 // never one Buffer of the whole
    assert.ok(k.resultRef.closed);

    // the kept record, by reference (a file in the data dir)
    const rec = await c.records.get(key, { raw: true });
    assert.equal(sha(rec.result), hash);
    const [e] = await c.records.list(key);
    assert.equal(e.byRef, true);
    assert.equal(e.size, SIZE);
    const o = await other.once(key, () => assert.fail('ran'), { raw: true, maxAge: 60000 });
    assert.equal(o.source, 'record');
    assert.equal(sha(o.value), hash);
  } finally {
    await other.close();
    owner.p.kill();
  }
});

test('every reference is released: more reads than a connection may hold', async () => {
  const key = 'by-ref';             // the record the test before kept
  const reader = await connect({ socket: broker.socket, autostart: false });
  try {
    for (let i = 0; i < LIMIT_CONN_REFS + 8; i++) {
      const r = await reader.records.get(key, { ref: true });
      assert.equal(r.resultRef.size, SIZE);
      await r.resultRef.close();
    }
    await reader.ping();
  } finally {
    await reader.close();
  }
});

test('a coordctl once owner whose output is larger than a frame: a Node follower gets it', async () => {
  const key = 'by-ref-ctl';
  const n = 3_000_000;
  const owner = spawn(COORDCTL, ['--socket', broker.socket, '--no-autostart', 'once', key, '--',
    'sh', '-c', `read go; head -c ${n} /dev/zero | tr '\\0' a`], { stdio: ['pipe', 'ignore', 'inherit'] });
  const exited = new Promise((r) => owner.once('exit', r));
  const given = (await c.stats()).refsGiven;
  await followers(key, 0);                              // its flight runs
  const follower = c.once(key, () => assert.fail('ran'), { raw: true, wait: 20000 });
  await followers(key, 1);
  owner.stdin.end('go\n');
  const r = await follower;
  assert.equal(r.source, 'live');
  // coordctl once's result: format 1, the exit status, then stdout
  assert.equal(r.value.length, 2 + n);
  assert.deepEqual([...r.value.subarray(0, 2)], [1, 0]);
  assert.ok(r.value.subarray(2).equals(Buffer.alloc(n, 'a')));
  assert.equal(await exited, 0);
  assert.equal((await c.stats()).refsGiven, given + 1);  // it came as a result_ref
});
