// bench/big-frames.js [MiB...] - how long records.get takes for a record of
// N MiB (default 8 30 60), read back from a coordd started with
// --max-frame 64MiB: the time of the frame reader and decoder on one large
// frame arriving in many socket reads.  Starts its own coordd
// ($COORD_BROKER or ../../build/broker/coordd).  Not a test.
import { connect } from '../src/index.js';
import { startBroker } from '../testlib/broker.js';

const sizes = (process.argv.length > 2 ? process.argv.slice(2) : ['8', '30', '60']).map(Number);
const MiB = 1024 * 1024;
const broker = await startBroker({ args: ['--max-frame', String(64 * MiB), '--max-outbuf', String(256 * MiB)] });
const client = await connect({ socket: broker.socket, autostart: false, client: 'bench' });
for (const n of sizes) {
  const key = `big-${n}`;
  const j = await client.flight.join(key, { ttl: 60000 });
  await client.flight.complete(j.flight, j.fence, new Uint8Array(n * MiB - 4096).fill(7), { keep: 60000 });
  const start = process.hrtime.bigint();
  const r = await client.records.get(key, { raw: true });
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  if (r.result.length !== n * MiB - 4096) throw new Error('wrong size');
  console.log(`node records.get ${n} MiB: ${s.toFixed(3)} s`);
}
await client.close();
await broker.stop();
