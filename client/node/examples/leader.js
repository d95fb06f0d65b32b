// examples/leader.js - leadership with fenced, at-most-once commits, a
// workstream descriptor, an outbox claim, draining and the term history.
import { connect } from 'coord-client';

const client = await connect();
const d = await client.leaders.define('indexer', { maxHold: 60_000, steal: 'incident-only', fallback: 'SERVER_COORDINATED' });
console.log(`defined: max hold ${d.maxHoldMs} ms, steal ${d.steal}`);
const generation = await client.leader('indexer', { lease: 5000, drainGrace: 2000 }, async (leader) => {
  console.log(`leading generation ${leader.generation}: ${leader.state} (${leader.mode})`);
  leader.ondrain = (ev) => console.log(`asked to drain (${ev.detail.reason}): finishing`);
  // a new leader first reconciles what an earlier one claimed and never settled
  for (const op of await leader.pending()) console.log('to reconcile:', op.opId);
  // claim before an external effect, commit after it (same op id = idempotency key)
  const c = await leader.claim('email-1');
  console.log(`claimed ${c.claimed}, reconcile ${c.reconcile}`);
  if (c.claimed) await leader.commit('email-1');     // ... after sending it
  const r = await leader.commit('batch-1', 'cursor', { offset: 100 });
  const again = await leader.commit('batch-1', 'cursor', { offset: 100 });
  console.log(`applied ${r.applied}, duplicate ${again.duplicate === true}`);
  console.log('cursor', JSON.stringify((await leader.read('cursor')).value));
  return leader.generation;
});
console.log('info', (await client.leaders.info('indexer')).state);
const [last] = await client.leaders.history('indexer', { limit: 1 });
console.log(`history: generation ${last.generation} led by ${last.client}, ours: ${last.generation === generation}`);
await client.close();
