// examples/once.js - single-flight: one caller fetches, the others share the result.
import { connect } from 'coord-client';

const client = await connect();
const fetchConfig = () => client.once('config-v1', async ({ fence }) => {
  console.log(`fetching (fence ${fence})`);
  return { theme: 'dark', fetchedAt: Date.now() };
}, { keep: 60_000, maxAge: 60_000 });

const first = await fetchConfig();
const second = await fetchConfig();          // served from the completion record
console.log(first.source, second.source, JSON.stringify(second.value.theme));
console.log('record:', (await client.records.get('config-v1')).status);
await client.records.purge('config-');
await client.close();
