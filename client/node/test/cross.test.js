// Across processes and languages: coordctl (libcoord) and Node clients on one
// broker, and 10 Node processes x 100 requests on one name.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { connect } from '../src/index.js';
import { startBroker, deferred, run, COORDCTL, PKG } from '../testlib/broker.js';

let broker, c;
before(async () => {
  broker = await startBroker();
  c = await connect({ socket: broker.socket, autostart: false });
});
after(async () => {
  await c.close();
  await broker.stop();
});

const ctl = (args, opts) => spawn(COORDCTL, ['--socket', broker.socket, '--no-autostart', ...args],
  { stdio: ['pipe', 'pipe', 'pipe'], ...opts });

function waitOutput(p, want) {
  return new Promise((resolve, reject) => {
    let out = '';
    const on = (d) => { out += d; if (out.includes(want)) { p.stdout.off('data', on); resolve(out); } };
    p.stdout.on('data', on);
    p.once('exit', (code) => reject(new Error(`exited ${code} before printing ${want}: ${out}`)));
  });
}
const exitOf = (p) => new Promise((r) => (p.exitCode !== null ? r(p.exitCode) : p.once('exit', (code) => r(code))));

async function followers(key, count) {
  const w = c.watch(['-flights']);
  await w.ready;
  const has = async () => ((await c.flight.list()).find((f) => f.key === key)?.followers ?? -1) >= count;
  if (!(await has())) for await (const ev of w) if (ev.what === 'joined' && ev.key === key && await has()) break;
  await w.return();
}

test('a coordctl lock holder and a Node waiter', async () => {
  const holder = ctl(['lock', 'shared-name', '--', 'sh', '-c', 'echo held; read line; echo done']);
  await waitOutput(holder, 'held\n');
  let st = await c.locks.query();
  const h = st.held.find((e) => e.name === 'shared-name');
  assert.equal(h.client, 'coordctl');
  let holderDone = false;
  holder.once('exit', () => { holderDone = true; });
  const p = c.locks.request('shared-name', (l) => ({ token: l.token, holderDone }));
  st = await c.locks.query();
  assert.equal(st.pending.filter((e) => e.name === 'shared-name').length, 1);
  holder.stdin.end('go\n');
  const r = await p;
  assert.ok(r.token > h.token);
  assert.equal(await exitOf(holder), 0);
});

test('a Node owner and coordctl once followers share one flight, and the other way round', async () => {
  const key = 'cross-once';
  const ran = [];
  const owner = c.once(key, async () => {
    await followers(key, 2);
    ran.push('node');
    const out = Buffer.from('hello from node\n');
    // coordctl once result format 1: byte 0 format, byte 1 exit status, stdout
    return Uint8Array.from([1, 0, ...out]);
  }, { raw: true });
  await followers(key, 0);           // Node's join is the owner's
  const f1 = ctl(['once', key, '--', 'sh', '-c', 'echo follower ran']);
  const f2 = ctl(['once', key, '--', 'sh', '-c', 'echo follower ran']);
  const outs = [f1, f2].map((p) => new Promise((r) => { let o = ''; p.stdout.on('data', (d) => { o += d; }); p.once('close', (code) => r({ code, o })); }));
  const o = await owner;
  assert.equal(o.source, 'owner');
  for (const r of await Promise.all(outs)) assert.deepEqual(r, { code: 0, o: 'hello from node\n' });
  assert.deepEqual(ran, ['node']);

  // coordctl owns, Node follows (the exit status travels in byte 1)
  const key2 = 'cross-once-2';
  const ctlOwner = ctl(['once', key2, '--', 'sh', '-c', 'echo from ctl; read line; exit 3']);
  await waitOutput(ctlOwner, 'from ctl\n');
  const f = c.once(key2, () => assert.fail('node ran'), { raw: true });
  await followers(key2, 1);
  ctlOwner.stdin.end('\n');
  const r = await f;
  assert.equal(r.source, 'live');
  assert.deepEqual([...r.value], [1, 3, ...Buffer.from('from ctl\n')]);
  assert.equal(await exitOf(ctlOwner), 3);
});

test('10 Node processes x 100 requests on one name: FIFO and token order', async () => {
  const dir = fs.mkdtempSync(path.join(broker.dir, 'fifo-'));
  const log = path.join(dir, 'grants.log');
  const N = 10, COUNT = 100;
  const kids = [];
  for (let i = 0; i < N; i++) {
    const k = spawn(process.execPath, ['testlib/fifo-child.js', broker.socket, 'fifo-name', String(COUNT), log],
      { cwd: PKG, stdio: ['pipe', 'pipe', 'inherit'] });
    kids.push(k);
  }
  await Promise.all(kids.map((k) => waitOutput(k, 'connected\n')));
  for (const k of kids) k.stdin.end('go\n');
  const codes = await Promise.all(kids.map(exitOf));
  assert.deepEqual(codes, Array(N).fill(0));
  const lines = fs.readFileSync(log, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(lines.length, N * COUNT);
  // tokens strictly increase in grant order
  for (let k = 1; k < lines.length; k++) assert.ok(lines[k].token > lines[k - 1].token, `token order at grant ${k}`);
  // FIFO: what waited while grant k was held is granted next, in that order
  let checked = 0;
  for (let k = 0; k < lines.length; k++) {
    const { pending } = lines[k];
    for (let j = 0; j < pending.length; j++) {
      assert.equal(lines[k + 1 + j].conn, pending[j], `grant ${k + 1 + j} follows the queue seen at grant ${k}`);
      checked++;
    }
  }
  assert.ok(checked > N * COUNT, `the queue was exercised (${checked} FIFO checks)`);
  // each process: its own requests in order
  const byConn = new Map();
  for (const l of lines) {
    const prev = byConn.get(l.conn) ?? -1;
    assert.equal(l.i, prev + 1);
    byConn.set(l.conn, l.i);
  }
  assert.equal(byConn.size, N);
});

test('a coordctl leader-run leader fenced by a Node incident steal; the Node leader commits', async () => {
  const ws = 'cross-leader';
  const ctlLeader = ctl(['leader-run', ws, '--', 'sh', '-c',
    'trap "exit 0" TERM; echo "leading $COORD_GENERATION"; sleep 30 & wait']);
  let err = '';
  ctlLeader.stderr.on('data', (d) => { err += d; });
  const out = await waitOutput(ctlLeader, '\n');
  const ctlGen = Number(/leading (\d+)/.exec(out)[1]);
  assert.equal((await c.leaders.info(ws)).liveGeneration, ctlGen);
  const r = await c.leader(ws, { steal: true, incident: 'INC-cross' }, async (L) => {
    assert.ok(L.generation > ctlGen);
    // coordctl is told (leader.lost, reason incident) and stops its command:
    // that exits 0 on SIGTERM, coordctl exits 1 (leadership lost)
    assert.equal(await exitOf(ctlLeader), 1);
    return L.commit('cross-op', 'k', 'from node');
  });
  assert.deepEqual(r, { applied: true });
  assert.match(err, /lost leadership of cross-leader \(incident: INC-cross\)/);
  const hist = await c.leaders.history(ws, { limit: 2 });
  assert.deepEqual(hist.map((t) => [t.pid, t.reason, t.incident]),
    [[process.pid, 'resigned', 'INC-cross'], [ctlLeader.pid, 'incident', undefined]]);
  assert.equal(hist[1].client, 'coordctl');
});

test('coordctl as the Node leader\'s helper (claim, commit by generation), operator (drain), then incident thief', async () => {
  const ws = 'cross-leader-2';
  const sig = deferred();
  const lead = c.leader(ws, { raw: true }, async (L) => {
    const g = ['--generation', String(L.generation)];
    const claim = await run(COORDCTL, ['--socket', broker.socket, '--no-autostart', 'leader', 'claim', ws, 'op-c', ...g]);
    assert.equal(claim.code, 0, claim.stderr);
    assert.deepEqual(await L.claim('op-c'), { claimed: true, reconcile: false, applied: false, abandoned: false });
    const commit = await run(COORDCTL, ['--socket', broker.socket, '--no-autostart', 'leader', 'commit', ws, 'op-c', 'k', 'from-c', ...g]);
    assert.equal(commit.code, 0, commit.stderr);
    assert.deepEqual(await L.read('k'), { value: new Uint8Array(Buffer.from('from-c')), generation: L.generation });
    assert.deepEqual(await L.claim('op-c'), { claimed: false, reconcile: false, applied: true, abandoned: false, generation: L.generation });
    // an operator's drain reaches the Node leader
    const drained = new Promise((r) => L.addEventListener('drain', r, { once: true }));
    const drain = await run(COORDCTL, ['--socket', broker.socket, '--no-autostart', 'leader', 'drain', ws]);
    assert.equal(drain.code, 0, drain.stderr);
    assert.equal((await drained).detail.reason, 'requested');
    assert.equal(L.state, 'DRAINING');
    sig.resolve(L);
    return new Promise((r) => L.signal.addEventListener('abort', r));
  });
  const leadR = assert.rejects(lead, (e) => e.code === 'FENCED' && e.reason === 'incident' && e.incident === 'INC-from-c');
  const L = await sig.promise;
  const thief = ctl(['leader-run', '--steal', '--incident', 'INC-from-c', ws, '--', 'sh', '-c', 'echo "leading $COORD_GENERATION"']);
  const out = await waitOutput(thief, '\n');
  await leadR;
  assert.ok(Number(/leading (\d+)/.exec(out)[1]) > L.generation);
  assert.equal(await exitOf(thief), 0);
});
