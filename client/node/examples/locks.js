// examples/locks.js - navigator.locks code, unchanged, across processes.
import { connect } from 'coord-client';

const client = await connect({ client: 'example-locks' });   // $COORD_SOCKET or the default socket
const navigator = { locks: client.locks };

await navigator.locks.request('my-resource', async (lock) => {
  console.log(`holding ${lock.name} (${lock.mode}), fencing token ${lock.token}`);
  const { held } = await navigator.locks.query();
  console.log(`held: ${held.map((l) => l.name).join(', ')}`);
});
const got = await navigator.locks.request('my-resource', { ifAvailable: true }, (lock) => lock !== null);
console.log(`free again: ${got}`);
await client.close();
