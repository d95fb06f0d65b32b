// Every example runs against a real broker ($COORD_SOCKET) and prints what
// its README section says.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startBroker, run, PKG, COORDCTL, tempDir } from '../testlib/broker.js';
import fs from 'node:fs';
import path from 'node:path';

let broker;
before(async () => { broker = await startBroker(); });
after(async () => { await broker.stop(); });

const expected = {
  'locks.js': [/holding my-resource \(exclusive\), fencing token \d+/, /held: my-resource/, /free again: true/],
  'broadcast.js': [/received \{"type":"logout","user":"ada"\}/],
  'once.js': [/fetching \(fence \d+\)/, /owner record "dark"/, /record: completed/],
  'leader.js': [/defined: max hold 60000 ms, steal incident-only/, /leading generation \d+: LEADER \(active\)/,
    /claimed true, reconcile false/, /applied true, duplicate true/, /cursor \{"offset":100\}/, /info idle/, /history: generation \d+ led by leader\.js, ours: true/],
  'watch.js': [/-locks granted watched/, /-locks released watched/, /locks held now: 0/],
  'swr.js': [/revalidating, stale copy \{"tempC":21\}/, /served stale \(revalidating: true\) \{"tempC":21\}/,
    /onUpdated: completed/, /revalidated by owner/, /flight.updated: completed/, /now: \{"tempC":22\}/,
    /owner: HTTP 429/, /backing off \(backoff\), retry in 30 s/],
  'request-key.js': [/^request-v1:[0-9a-f]{64}$/m, /^request-v1\|POST\|https:\/\/api\.example\.com\/v1\/search\?a=1&b=2\|/m,
    /owner: \{"hits":3\}/],
};

test('examples/request-key.js prints the key coordctl key gives', async () => {
  const body = path.join(tempDir(), 'body.json');
  fs.writeFileSync(body, '{ "query": "coord", "limit": 10 }');
  const c = await run(COORDCTL, ['key', '--method', 'post', '--url', 'HTTPS://API.example.com:443/v1/search?b=2&a=1#results',
    '--content-type', 'application/json; charset=utf-8', '--body-file', body, '--header', 'Accept-Language: de-CH',
    '--user', 'user-42', '--auth-gen', '3']);
  assert.equal(c.code, 0, c.stderr);
  const r = await run(process.execPath, ['examples/request-key.js'], {
    cwd: PKG, env: { ...process.env, COORD_SOCKET: broker.socket },
  });
  assert.equal(r.stdout.split('\n')[0], c.stdout.trim());
  fs.rmSync(path.dirname(body), { recursive: true });
});

for (const [file, patterns] of Object.entries(expected)) {
  test(`examples/${file}`, async () => {
    const r = await run(process.execPath, [`examples/${file}`], {
      cwd: PKG, env: { ...process.env, COORD_SOCKET: broker.socket },
    });
    assert.equal(r.code, 0, r.stderr);
    for (const p of patterns) assert.match(r.stdout, p);
  });
}
