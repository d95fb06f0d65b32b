// testlib/fifo-child.js SOCKET NAME COUNT LOG - makes COUNT sequential
// locks.request(NAME) calls; while holding, appends one JSON line to LOG:
// {conn, token, pending: [conn of each request waiting on NAME, in order]}.
// The file's order is the grant order (the lock is exclusive).
import fs from 'node:fs';
import { connect } from '../src/index.js';

const [socket, name, count, log] = process.argv.slice(2);
const c = await connect({ socket, autostart: false, client: 'fifo-child' });
const conn = c.info.conn;
process.stdout.write('connected\n');
// all children start requesting together
await new Promise((r) => process.stdin.once('data', r));
process.stdin.destroy();
for (let i = 0; i < Number(count); i++) {
  await c.locks.request(name, async (l) => {
    const st = await c.locks.query();
    const pending = st.pending.filter((e) => e.name === name).map((e) => e.conn);
    fs.appendFileSync(log, `${JSON.stringify({ conn, token: l.token, i, pending })}\n`);
  });
}
await c.close();
