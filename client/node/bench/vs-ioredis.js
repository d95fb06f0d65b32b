// bench/vs-ioredis.js - Node's lock cycle against what a Node user would
// pick instead, in one run on one machine.  Not a test.
//
//   node bench/vs-ioredis.js [--seconds S] [--rounds N] [--warmup CYCLES]
//       [--coord SOCK --redis SOCK] [--server-cpu N] [--only coord|redis]
//
// coord's locks.request(name, () => {}) (lock.acquire + lock.release, two
// round trips, the promise settled after the release's reply) against
// ioredis doing SET name token NX PX 30000 and the compare-and-delete
// release script (defined with defineCommand, so EVALSHA, as an ioredis
// user writes it), both on a Unix socket, one connection each, one name,
// back to back.  Rounds alternate between the two (coord first in odd
// rounds) so that drift on a shared machine falls on both; the figure is
// the median of the per-round ratios, coord's cycles/s over ioredis's
// (>= 1: coord ahead).
//
// Starts its own coordd ($COORD_BROKER or ../../build/broker/coordd) and its
// own redis-server (PATH) in a temp dir unless --coord / --redis name
// sockets already listening (coord-bench's `clients` scenario passes its
// own); --server-cpu pins the servers it starts (tools/bench/clients.sh runs
// the client under taskset for each placement).  Prints one line per round
// and, last, one JSON line:
//   {"lang":"node","coord":cycles/s,"peer":cycles/s,"ratio":median ratio,
//    "cpu_us":{...}}   (CPU time per cycle of the client's and the
//                       servers' main threads, when it started them)
// ioredis is a devDependency of the package, for this bench only.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { connect } from '../src/index.js';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const seconds = Number(opt('--seconds', 1));
const rounds = Number(opt('--rounds', 6));
const warmup = Number(opt('--warmup', 3000));   // cycles each side first (JIT, both servers)
const only = opt('--only', '');         // 'coord' | 'redis': one side only (profiling)
const serverCpu = opt('--server-cpu');  // pin the servers we start (all their threads) to this CPU

const RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

async function startRedis(dir) {
  const sock = path.join(dir, 'redis.sock');
  const proc = spawn('redis-server', ['--port', '0', '--unixsocket', sock, '--unixsocketperm', '700',
    '--save', '', '--appendonly', 'no', '--dir', dir, '--loglevel', 'warning'],
  { stdio: ['ignore', 'ignore', 'inherit'] });
  const t0 = Date.now();
  while (!fs.existsSync(sock)) {
    if (proc.exitCode !== null || Date.now() - t0 > 10000) throw new Error('redis-server did not start (apt-get install redis-server)');
    await new Promise((r) => setTimeout(r, 10));
  }
  return { sock, pid: proc.pid, stop: () => proc.kill('SIGTERM') };
}

let dir = null;
let broker = null;
let redisSrv = null;
let coordSock = opt('--coord');
let redisSock = opt('--redis');
if (!coordSock || !redisSock) dir = fs.mkdtempSync(path.join(os.tmpdir(), 'coord-vs-ioredis-'));
if (!coordSock) {
  const { startBroker } = await import('../testlib/broker.js');
  broker = await startBroker({ dir, args: ['--log-level', 'error'] });
  coordSock = broker.socket;
}
if (!redisSock) {
  redisSrv = await startRedis(dir);
  redisSock = redisSrv.sock;
}

if (serverCpu !== undefined) {
  const { execFileSync } = await import('node:child_process');
  for (const pid of [broker?.proc.pid, redisSrv?.pid].filter(Boolean))
    execFileSync('taskset', ['-a', '-p', '-c', String(serverCpu), String(pid)], { stdio: 'ignore' });
}

const { default: Redis } = await import('ioredis');
const client = await connect({ socket: coordSock, autostart: false, client: 'bench' });
const redis = new Redis({ path: redisSock, lazyConnect: true, enableAutoPipelining: false });
await redis.connect();
redis.defineCommand('unlock', { numberOfKeys: 1, lua: RELEASE });

const noop = () => {};
async function coordCycles(n) {
  for (let i = 0; i < n; i++) await client.locks.request('bench/node', noop);
}
let tokenSeq = 0;
async function redisCycles(n) {
  for (let i = 0; i < n; i++) {
    // what a user's lock helper does: a unique token per acquisition
    const token = `${process.pid}:${++tokenSeq}`;
    if (await redis.set('bench/node', token, 'PX', 30000, 'NX') !== 'OK') throw new Error('redis: not acquired');
    if (await redis.unlock('bench/node', token) !== 1) throw new Error('redis: not released');
  }
}
// CPU time a process's main thread has run, in ns (0: unknown)
function cpuNs(pid) {
  if (!pid) return 0;
  try {
    return Number(fs.readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
  } catch {
    return 0;
  }
}
// cycles/s of fn over ~seconds, in batches of 100; the CPU time per cycle
// of this process's main thread and of the server's (us) go to cpu
async function measure(fn, serverPid, cpu) {
  let n = 0;
  const c0 = cpuNs(process.pid), s0 = cpuNs(serverPid);
  const start = process.hrtime.bigint();
  const end = start + BigInt(Math.round(seconds * 1e9));
  while (process.hrtime.bigint() < end) {
    await fn(100);
    n += 100;
  }
  const ns = Number(process.hrtime.bigint() - start);
  cpu.client.push((cpuNs(process.pid) - c0) / n / 1000);
  if (serverPid) cpu.server.push((cpuNs(serverPid) - s0) / n / 1000);
  return n / (ns / 1e9);
}

const us = (v) => (v.length ? Number(median(v).toFixed(2)) : null);
const median = (v) => { const s = [...v].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
try {
  if (only !== 'redis') await coordCycles(warmup);
  if (only !== 'coord') await redisCycles(warmup);
  const cs = [], rs = [], ratios = [];
  const ccpu = { client: [], server: [] }, rcpu = { client: [], server: [] };
  const coordPid = broker?.proc.pid, redisPid = redisSrv?.pid;
  for (let k = 0; k < rounds; k++) {
    let c = NaN, r = NaN;
    if (k % 2 === 1 && only !== 'redis') c = await measure(coordCycles, coordPid, ccpu);
    if (only !== 'coord') r = await measure(redisCycles, redisPid, rcpu);
    if (k % 2 === 0 && only !== 'redis') c = await measure(coordCycles, coordPid, ccpu);
    cs.push(c); rs.push(r); ratios.push(c / r);
    console.log(`round ${k + 1}: coord ${c.toFixed(0)}/s (${(1e6 / c).toFixed(1)} us), ioredis ${r.toFixed(0)}/s (${(1e6 / r).toFixed(1)} us), ratio ${(c / r).toFixed(2)}x`);
  }
  console.log(JSON.stringify({
    lang: 'node', what: 'locks.request vs ioredis SET NX PX + EVALSHA', node: process.version,
    coord: Math.round(median(cs)), peer: Math.round(median(rs)), ratio: Number(median(ratios).toFixed(3)),
    min: Number(Math.min(...ratios).toFixed(3)), max: Number(Math.max(...ratios).toFixed(3)),
    // CPU time per cycle (us), medians: the client's main thread, the server's
    cpu_us: {
      coord_client: us(ccpu.client), coord_server: us(ccpu.server),
      peer_client: us(rcpu.client), peer_server: us(rcpu.server),
    },
  }));
} finally {
  await client.close();
  redis.disconnect();
  if (broker) await broker.stop();
  if (redisSrv) redisSrv.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
}
