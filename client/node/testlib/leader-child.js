// testlib/leader-child.js SOCKET WORKSTREAM OP_ID - leads WORKSTREAM, claims
// OP_ID, prints "claimed <generation>", then waits to be killed (for the
// reconcile test: a leader that dies between its claim and its commit).
import { connect } from '../src/index.js';

const [socket, ws, opId] = process.argv.slice(2);
const c = await connect({ socket, autostart: false, client: 'leader-child' });
await c.leader(ws, { lease: 30000 }, async (L) => {
  const r = await L.claim(opId);
  if (!r.claimed) throw new Error(`claim refused: ${JSON.stringify(r)}`);
  process.stdout.write(`claimed ${L.generation}\n`);
  return new Promise(() => {});
});
