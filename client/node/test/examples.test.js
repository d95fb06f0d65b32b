// Every example runs against a real broker ($COORD_SOCKET) and prints what
// its README section says.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startBroker, run, PKG } from '../testlib/broker.js';

let broker;
before(async () => { broker = await startBroker(); });
after(async () => { await broker.stop(); });

const expected = {
  'locks.js': [/holding my-resource \(exclusive\), fencing token \d+/, /held: my-resource/, /free again: true/],
  'broadcast.js': [/received \{"type":"logout","user":"ada"\}/],
  'once.js': [/fetching \(fence \d+\)/, /owner record "dark"/, /record: completed/],
  'leader.js': [/leading generation \d+: LEADER/, /applied true, duplicate true/, /cursor \{"offset":100\}/, /info idle/],
  'watch.js': [/-locks granted watched/, /-locks released watched/, /locks held now: 0/],
};

for (const [file, patterns] of Object.entries(expected)) {
  test(`examples/${file}`, async () => {
    const r = await run(process.execPath, [`examples/${file}`], {
      cwd: PKG, env: { ...process.env, COORD_SOCKET: broker.socket },
    });
    assert.equal(r.code, 0, r.stderr);
    for (const p of patterns) assert.match(r.stdout, p);
  });
}
