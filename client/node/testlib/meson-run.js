// testlib/meson-run.js - what the meson test 'node-client' runs: `node --test`
// in the package directory, failing (not skipping) when the dependencies are
// not installed.
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { PKG } from './paths.js';

if (!fs.existsSync(path.join(PKG, 'node_modules', '@msgpack', 'msgpack', 'package.json'))) {
  console.error(`node-client: ${path.join(PKG, 'node_modules')} is missing: run \`npm ci\` in client/node first`);
  process.exit(1);
}
for (const [env, what] of [['COORD_BROKER', 'coordd'], ['COORD_CTL', 'coordctl']]) {
  if (process.env[env] && !fs.existsSync(process.env[env])) {
    console.error(`node-client: ${what} is not built (${process.env[env]}): run ninja -C <builddir> first`);
    process.exit(1);
  }
}
const r = spawnSync(process.execPath, ['--test'], { cwd: PKG, stdio: 'inherit' });
process.exit(r.status ?? 1);
