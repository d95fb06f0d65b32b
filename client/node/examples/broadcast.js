// examples/broadcast.js - BroadcastChannel between two clients (two processes
// work the same way).
import { connect } from 'coord-client';

const a = await connect();
const b = await connect();
const rx = new b.BroadcastChannel('app-events');
await rx.ready;
const got = new Promise((resolve) => { rx.onmessage = (e) => resolve(e.data); });
const tx = new a.BroadcastChannel('app-events');
tx.postMessage({ type: 'logout', user: 'ada' });
console.log('received', JSON.stringify(await got));
tx.close();
rx.close();
await Promise.all([a.close(), b.close()]);
