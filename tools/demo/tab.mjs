// tab.mjs - the demo's "tab" in Node.js (client/node), run by demo.py beside
// the C, coordctl and Python tabs; the same two jobs as tab.c:
//
//   node tab.mjs refresh NAME BASE       single-flight GET BASE/session with
//                                        stale-while-revalidate; prints "got VALUE (SOURCE)"
//   node tab.mjs outbox NAME BASE OP...  lead the workstream "outbox": reconcile
//                                        leader.pending by op id, then claim, send, commit
//
// Results are shared as coordctl's result format 1 (bytes 1, 0, then
// stdout), so every tab reads every other tab's.  Exit status: 0 done, 1 an
// error, 3 leadership lost (a late commit FENCED).
import http from 'node:http';
import { connect, FencedError } from '../../client/node/src/index.js';

const LEASE_MS = 2000;        // short, so that a frozen leader is fenced soon
const MAX_AGE_MS = 1000;      // a session is fresh this long ...
const STALE_MS = 60_000;      // ... then served stale this long while one tab revalidates

function request(method, url) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`${url}: HTTP ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end();
  });
}

async function refresh(name, base) {
  const client = await connect({ client: name });
  let revalidated = false;
  const r = await client.once('session', async ({ stale }) => {
    revalidated = !!stale;                          // the stale copy it replaces
    const body = await request('GET', `${base}/session?tab=${name}`);
    return new Uint8Array([1, 0, ...Buffer.from(`${body}\n`)]);
  }, { raw: true, keep: MAX_AGE_MS, maxAge: MAX_AGE_MS, stale: STALE_MS });
  await client.close();
  const how = r.source === 'owner' ? (revalidated ? 'owner, revalidated it' : 'owner, fetched it')
    : { live: 'live, from the owner', stale: 'stale, served at once' }[r.source] ?? r.source;
  console.log(`got ${Buffer.from(r.value.subarray(2)).toString().trim()} (${how})`);
}

async function outbox(name, base, ops) {
  const client = await connect({ client: name });
  let lost = false, work = null;
  const term = async (leader) => {
    console.log(`leading the outbox as generation ${leader.generation}`);
    const done = new Set(), skipped = [];
    const drain = async (op) => {
      if (done.has(op)) return;
      done.add(op);
      const claim = await leader.claim(op);
      if (!claim.claimed) { skipped.push(op); return; }     // applied or abandoned before
      if (claim.reconcile) {
        if (await request('GET', `${base}/sent?op=${op}`) === 'applied') {
          console.log(`${op}: claimed by generation ${claim.previousGeneration} and never committed; `
            + 'the backend has it: commit, do not resend');
          await leader.commit(op);
          return;
        }
        console.log(`${op}: claimed by generation ${claim.previousGeneration}; the backend never got it: send it`);
      }
      const answer = await request('POST', `${base}/send?op=${op}&tab=${name}&gen=${leader.generation}`);
      try {
        await leader.commit(op);
      } catch (err) {
        if (!(err instanceof FencedError)) throw err;
        console.log(`late commit of ${op} refused: FENCED (generation ${leader.generation} is not the live one)`);
        throw err;
      }
      console.log(`${op}: sent (${answer}), committed`);
    };
    for (const p of await leader.pending()) {            // oldest claim first
      console.log(`pending from an earlier leader: ${p.opId}`);
      await drain(p.opId);
    }
    for (const op of ops) await drain(op);
    if (skipped.length) console.log(`settled by earlier leaders, skipped: ${skipped.join(' ')}`);
  };
  // leader() resolves when the callback's work has, and resigns first; on a
  // lost leadership it rejects at once while the work still runs: wait for
  // the work too, whose late commit the broker refuses
  const fenced = (err) => { if (!(err instanceof FencedError)) throw err; lost = true; };
  await client.leader('outbox', { lease: LEASE_MS }, (leader) => (work = term(leader)))
    .then(() => { if (!lost) console.log('outbox drained, resigned'); }, fenced);
  if (work) await work.catch(fenced);
  await client.close();
  if (lost) process.exit(3);
}

const [mode, name, base, ...ops] = process.argv.slice(2);
if (mode === 'refresh' && base) await refresh(name, base);
else if (mode === 'outbox' && base) await outbox(name, base, ops);
else { console.error('usage: tab.mjs refresh NAME BASE | outbox NAME BASE OP...'); process.exit(2); }
