// examples/swr.js - stale-while-revalidate and backoff with client.once.
import { connect, BackoffError, RetryAfterError } from 'coord-client';

const client = await connect();
const other = await connect();             // another process, as far as the broker cares
const key = 'weather-zurich';
// a record younger than maxAge is fresh; up to maxAge + stale it is served stale
// while one caller revalidates it
const swr = { keep: 600_000, maxAge: 0, stale: 600_000 };

await client.once(key, () => ({ tempC: 21 }), { keep: 600_000 });

let started, release;
const running = new Promise((r) => { started = r; });
const gate = new Promise((r) => { release = r; });
const revalidation = client.once(key, async ({ stale }) => {
  console.log(`revalidating, stale copy ${JSON.stringify(stale.value)} (${stale.ageMs} ms old)`);
  started();
  await gate;                              // the upstream is slow
  return { tempC: 22 };
}, swr);
await running;

const updated = new Promise((r) => other.addEventListener('flight.updated', (e) => r(e.detail), { once: true }));
const served = await other.once(key, () => { throw new Error('not called: served stale'); }, {
  ...swr, onUpdated: ({ status }) => console.log(`onUpdated: ${status}`),
});
console.log(`served ${served.source} (revalidating: ${served.revalidating}) ${JSON.stringify(served.value)}`);
release();
console.log('revalidated by', (await revalidation).source);
console.log('flight.updated:', (await updated).status);
console.log('now:', JSON.stringify((await other.records.get(key)).value));

// backoff: the upstream said "429, retry after 30 s"
const limited = `rate-limited-${process.pid}`;
await client.once(limited, () => { throw new RetryAfterError(30_000, 'HTTP 429'); })
  .catch((e) => console.log(`owner: ${e.message}`));
try {
  await other.once(limited, () => 'not called during the backoff');
} catch (e) {
  if (!(e instanceof BackoffError)) throw e;
  console.log(`backing off (${e.source}), retry in ${Math.ceil(e.retryAfter / 1000)} s`);
}
await client.records.purge(key);
await Promise.all([client.close(), other.close()]);
