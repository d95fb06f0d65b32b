// examples/watch.js - lifecycle events and the broker's counters.
import { connect } from 'coord-client';

const client = await connect();
const events = client.watch(['-locks']);
await events.ready;
await client.locks.request('watched', () => {});
for await (const ev of events) {
  console.log(ev.channel, ev.what, ev.name);
  if (ev.what === 'released') break;
}
const stats = await client.stats();
console.log('locks held now:', stats.locksHeld);
await client.close();
