// testlib/hold-child.js SOCKET NAME LEASE_MS - holds NAME with a lease until
// the lock is lost; prints "held" then "lost <error name>" (for the lease test).
import { connect } from '../src/index.js';

const [socket, name, lease] = process.argv.slice(2);
const c = await connect({ socket, autostart: false, client: 'hold-child' });
const p = c.locks.request(name, { lease: Number(lease) }, (l) => {
  process.stdout.write('held\n');
  return new Promise((resolve) => l.signal.addEventListener('abort', resolve));
});
try {
  await p;
  process.stdout.write('released\n');
} catch (e) {
  process.stdout.write(`lost ${e.name}\n`);
}
await c.close();
