// Descriptor files and the leader fallback: every vector of
// tests/vectors/desc-files.json through parseDescriptor and
// readLeaderFallback (the C parser runs the same vectors); note 000's fields
// (lockName, capabilities, ifAvailable) against a real coordd; and leader()
// without a broker: a child process connecting to a socket with nothing
// behind it, with COORD_CONFIG_DIR holding the workstream's file, runs its
// callback read-only with no generation (SERVER_COORDINATED), fails closed
// without a file, runs alone only with singleInstance under SINGLE_INSTANCE;
// a client whose broker died does the same from client.leader() with
// fallback: true (without it the error stands).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
  connect, parseDescriptor, readLeaderFallback, runLeaderFallback, FallbackLeader,
  ProtocolPinnedError, PolicyError, ReadOnlyError,
} from '../src/index.js';
import { startBroker, tempDir, run, PKG } from '../testlib/broker.js';

const VECTORS = JSON.parse(fs.readFileSync(path.resolve(PKG, '../../tests/vectors/desc-files.json'), 'utf8'));
const NOTE = VECTORS.vectors[0].text;
assert.ok(NOTE.includes('lockName: app:leader:account-outbox:v3'));

function configDir(files) {
  const dir = tempDir('coord-node-cfg-');
  fs.mkdirSync(path.join(dir, 'workstreams'));
  for (const [ws, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, 'workstreams', `${ws}.v1`), text);
  return dir;
}

test('descriptor vectors: parseDescriptor as the C parser', () => {
  assert.ok(VECTORS.vectors.length >= 30);
  for (const v of VECTORS.vectors) {
    const d = parseDescriptor(v.text);
    if (v.error_lines) {
      assert.deepEqual(d.errors.map((e) => e.line), v.error_lines, `${v.name}: ${JSON.stringify(d.errors)}`);
      continue;
    }
    assert.deepEqual(d.errors, [], v.name);
    assert.deepEqual(d.values, v.fields, v.name);
    if ('max_hold_ms' in v) assert.equal(d.maxHoldMs, v.max_hold_ms, v.name);
    if ('capabilities' in v) assert.equal(d.capabilities, v.capabilities, v.name);
    if ('disabled' in v) assert.equal(d.disabled, v.disabled, v.name);
  }
});

test('fallback vectors: readLeaderFallback', () => {
  for (const v of VECTORS.fallback) {
    const dir = configDir(v.file === null ? {} : { [v.workstream]: v.file });
    const fb = readLeaderFallback(v.workstream, { configDir: dir, scope: v.scope ?? undefined });
    assert.equal(fb.action, v.action, `${v.name}: ${fb.reason}`);
    assert.ok(fb.reason, v.name);
    fs.rmSync(dir, { recursive: true });
  }
});

// ---- against a real broker ----

let broker, c;
before(async () => {
  broker = await startBroker();
  c = await connect({ socket: broker.socket, client: 'descfile' });
});
after(async () => {
  await c.close();
  await broker.stop();
});

test('lockName, capabilities and ifAvailable: defined, described, enforced', async () => {
  const d = await c.leaders.define('ns-ob', {
    lockName: 'app:leader:ns-ob:v3', capabilities: ['outbox', 'claims'], ifAvailable: 'never',
  });
  assert.equal(d.lockName, 'app:leader:ns-ob:v3');
  assert.equal(d.capabilities, 'outbox,claims');
  assert.equal(d.ifAvailable, 'never');
  await assert.rejects(c.leader('ns-ob', () => 1), (e) => e instanceof ProtocolPinnedError && /capability outbox/.test(e.message));
  await assert.rejects(c.leader('ns-ob', { capabilities: ['claims', 'outbox'], ifAvailable: true }, () => 1), PolicyError);
  const held = await c.leader('ns-ob', { capabilities: 'claims,outbox' }, async (L) => {
    const q = await c.locks.query();
    return q.held.map((l) => l.name);
  });
  assert.ok(held.includes('app:leader:ns-ob:v3'), JSON.stringify(held));
  // the note's canonical fence names the remote ledger: refused here, naming the flag
  await assert.rejects(c.leaders.define('ns-ob', { canonicalFence: 'server-lease-ledger' }), /--ledger etcd/);
});

// ---- without a broker ----

// A child node process: connects to nothing (no autostart), then takes the
// fallback; prints what its callback saw.
const CHILD = `
import { connect, runLeaderFallback } from ${JSON.stringify(path.join(PKG, 'src/index.js'))};
const [ws, sock, single] = process.argv.slice(1);
try {
  const c = await connect({ socket: sock, autostart: false });
  await c.close();
  console.log('connected?!');
} catch (e) {
  try {
    const out = await runLeaderFallback(ws, { singleInstance: single === '1' }, async (L) => {
      let commit;
      try { await L.commit('op-1'); commit = 'ok'; } catch (err) { commit = err.code; }
      return \`ran mode=\${L.mode} fallback=\${L.fallback} generation=\${L.generation} commit=\${commit}\`;
    }, e);
    console.log(out);
  } catch (err) {
    console.log(\`closed code=\${err.code} action=\${err.fallback?.action}\`);
    console.error(err.fallback?.reason);
    process.exitCode = 3;
  }
}
`;

async function child(cfg, ws, single = false) {
  const sock = path.join(cfg, 'nothing.sock');
  return run(process.execPath, ['--input-type=module', '-e', CHILD, ws, sock, single ? '1' : '0'],
    { env: { ...process.env, COORD_CONFIG_DIR: cfg } });
}

test('no broker: SERVER_COORDINATED runs read-only with no generation; no file fails closed', async () => {
  const cfg = configDir({
    'account-outbox': NOTE,
    solo: 'schema: crossTabLeader.v1\nfallback: SINGLE_INSTANCE\n',
    closed: 'schema: crossTabLeader.v1\nfallback: FAIL_CLOSED\n',
  });
  let r = await child(cfg, 'account-outbox');
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout.trim(), 'ran mode=read-only fallback=SERVER_COORDINATED generation=undefined commit=READ_ONLY');
  r = await child(cfg, 'other');
  assert.equal(r.code, 3);
  assert.equal(r.stdout.trim(), 'closed code=CONNECT action=fail-closed');
  assert.match(r.stderr, /no descriptor file/);
  r = await child(cfg, 'closed', true);
  assert.equal(r.stdout.trim(), 'closed code=CONNECT action=fail-closed');
  r = await child(cfg, 'solo');
  assert.equal(r.stdout.trim(), 'closed code=CONNECT action=single-instance');
  assert.match(r.stderr, /singleInstance/);
  r = await child(cfg, 'solo', true);
  assert.equal(r.stdout.trim(), 'ran mode=single-instance fallback=SINGLE_INSTANCE generation=undefined commit=CONNECT');
  fs.rmSync(cfg, { recursive: true });
});

test('client.leader() after its broker died takes the fallback, or fails closed', async () => {
  const b2 = await startBroker();
  const c2 = await connect({ socket: b2.socket, client: 'descfile-dying' });
  const gone = new Promise((r) => c2.addEventListener('disconnect', r, { once: true }));
  await b2.kill();
  await gone;
  const cfg = configDir({ 'account-outbox': NOTE });
  // without the option the error stands, file or not
  await assert.rejects(c2.leader('account-outbox', { configDir: cfg }, () => 1),
    (e) => (e.code === 'CLOSED' || e.code === 'CONNECT') && e.fallback === undefined);
  const L = await c2.leader('account-outbox', { fallback: true, configDir: cfg }, (x) => x);
  assert.ok(L instanceof FallbackLeader);
  assert.equal(L.mode, 'read-only');
  assert.equal(L.generation, undefined);
  await assert.rejects(L.claim('op'), ReadOnlyError);
  await assert.rejects(c2.leader('nofile', { fallback: true, configDir: cfg }, () => 1),
    (e) => (e.code === 'CLOSED' || e.code === 'CONNECT') && e.fallback?.action === 'fail-closed');
  await c2.close();
  // closed by the user: never a fallback
  await assert.rejects(c2.leader('account-outbox', { fallback: true, configDir: cfg }, () => 1), (e) => e.fallback === undefined);
  fs.rmSync(cfg, { recursive: true });
});
