// The package as a TypeScript user and npm see it: index.d.ts type-checks
// against a file that uses every export (tsc --noEmit, TypeScript from the
// devDependencies), and the tarball holds what the README points at.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import * as coord from '../src/index.js';
import { PKG } from '../testlib/paths.js';

const TYPES = path.join(PKG, 'test', 'types');

test('the type test names every export of the package', () => {
  const ts = fs.readFileSync(path.join(TYPES, 'every-export.ts'), 'utf8');
  const imported = new Set(ts.match(/import \{([^}]*)\} from 'coord-client'/)[1].split(/[\s,]+/).filter(Boolean));
  assert.deepEqual(Object.keys(coord).filter((name) => !imported.has(name)), []);
});

test('index.d.ts type-checks (tsc --noEmit, strict)', () => {
  const tsc = path.join(PKG, 'node_modules', 'typescript', 'bin', 'tsc');
  assert.ok(fs.existsSync(tsc), 'typescript is not installed: run `npm ci` in client/node');
  const r = spawnSync(process.execPath, [tsc, '-p', path.join(TYPES, 'tsconfig.json')], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

test('package.json: exports itself, ships the examples the README names', () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(PKG, 'package.json'), 'utf8'));
  assert.equal(pkg.exports['./package.json'], './package.json');
  assert.ok(pkg.devDependencies.typescript);
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const r = spawnSync(npm, ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: PKG, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const files = new Set(JSON.parse(r.stdout)[0].files.map((f) => f.path));
  const readme = fs.readFileSync(path.join(PKG, 'README.md'), 'utf8');
  const named = [...new Set(readme.match(/examples\/[\w.-]+\.js/g))];
  assert.ok(named.length >= 5, named.join(' '));
  for (const f of [...named, 'index.d.ts', 'src/index.js', 'README.md', 'package.json'])
    assert.ok(files.has(f), `${f} is not in the npm tarball`);
  assert.ok(![...files].some((f) => f.startsWith('test/') || f.startsWith('node_modules/')));
});
