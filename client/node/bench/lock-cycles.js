// bench/lock-cycles.js [SECONDS] - lock cycles per second from Node: one
// client, one name, locks.request(name, () => {}) back to back (each cycle is
// lock.acquire + lock.release, two round trips).  Starts its own coordd
// ($COORD_BROKER or ../../build/broker/coordd).  Not a test.
//
// Compare with libcoord's figure from the same machine and run:
//   build/tools/bench/coord-bench --quick   (the lock-cycle line)
import { connect } from '../src/index.js';
import { startBroker } from '../testlib/broker.js';

const seconds = Number(process.argv[2] || 2);
const broker = await startBroker();
const client = await connect({ socket: broker.socket, autostart: false, client: 'bench' });
const noop = () => {};
for (let i = 0; i < 2000; i++) await client.locks.request('bench', noop);   // warm-up
let n = 0;
const start = process.hrtime.bigint();
const end = start + BigInt(Math.round(seconds * 1e9));
while (process.hrtime.bigint() < end) {
  for (let i = 0; i < 100; i++) await client.locks.request('bench', noop);
  n += 100;
}
const s = Number(process.hrtime.bigint() - start) / 1e9;
console.log(`node lock-cycle: ${Math.round(n / s)} cycles/s (${n} cycles in ${s.toFixed(2)} s, ${(s * 1e6 / n).toFixed(1)} us/cycle)`);
await client.close();
await broker.stop();
