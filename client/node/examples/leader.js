// examples/leader.js - leadership with fenced, at-most-once commits.
import { connect } from 'coord-client';

const client = await connect();
await client.leader('indexer', { lease: 5000 }, async (leader) => {
  console.log(`leading generation ${leader.generation}: ${leader.state}`);
  const r = await leader.commit('batch-1', 'cursor', { offset: 100 });
  const again = await leader.commit('batch-1', 'cursor', { offset: 100 });
  console.log(`applied ${r.applied}, duplicate ${again.duplicate === true}`);
  console.log('cursor', JSON.stringify((await leader.read('cursor')).value));
});
console.log('info', (await client.leaders.info('indexer')).state);
await client.close();
