// Request keys at the edges where the clients once disagreed: JSON nested
// to jansson's limit and far past it (no recursion: RequestKeyError, never a
// RangeError, whatever the stack), a NUL in a text field, authGen at 2^53,
// URLs at the C client's length limit (libcurl's 8,000,000 bytes), a NUL
// after a top-level JSON scalar.  Where C gives a key, the key is compared
// with `coordctl key` (libcoord).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { requestKey, RequestKeyError } from '../src/index.js';
import { COORDCTL, tempDir } from '../testlib/broker.js';

const base = { method: 'POST', url: 'http://a/', user: 'u', authGen: 0, contentType: 'application/json' };
const refused = (field) => (e) => e instanceof RequestKeyError && e.field === field;
const dir = tempDir();

// libcoord's key of a JSON body (coordctl key), or {error}.
function cKey(body) {
  const f = path.join(dir, 'body');
  fs.writeFileSync(f, body);
  const r = spawnSync(COORDCTL, ['key', '--method', 'POST', '--url', 'http://a/', '--user', 'u', '--auth-gen', '0',
    '--content-type', 'application/json', '--body-file', f], { encoding: 'utf8' });
  return r.status === 0 ? { key: r.stdout.trim() } : { error: r.stderr };
}

const nest = (open, close, n, inner) => open.repeat(n) + inner + close.repeat(n);

test('JSON nesting: the same keys and refusals as libcoord at jansson\'s depth (2048)', () => {
  const cases = [
    nest('[', ']', 2047, '1'), nest('[', ']', 2048, '1'), nest('[', ']', 2048, ''), nest('[', ']', 2049, ''),
    nest('{"a":', '}', 2047, '1'), nest('{"a":', '}', 2048, '1'), nest('[{"a":', '}]', 1023, '1'),
    nest('[{"a":', '}]', 1024, '1'),
  ];
  for (const body of cases) {
    const c = cKey(body);
    let n;
    try {
      n = { key: requestKey({ ...base, body }).key };
    } catch (e) {
      assert.ok(e instanceof RequestKeyError && e.field === 'body', `${body.slice(0, 12)}: ${e.name}: ${e.message}`);
      n = { error: e.message };
    }
    assert.equal(n.key, c.key, `${body.length} bytes starting ${body.slice(0, 12)}: node ${n.key ?? n.error}, C ${c.key ?? c.error}`);
  }
});

test('JSON nested far past the limit is a RequestKeyError, also on a small stack', () => {
  for (const body of [nest('[', ']', 100000, ''), nest('{"a":', '}', 100000, '1'), '['.repeat(1e6)])
    assert.throws(() => requestKey({ ...base, body }), refused('body'));
  // on a stack too small for 2047 levels of recursion
  const child = spawnSync(process.execPath, ['--stack-size=200', '--input-type=module', '-e', `
    import { requestKey } from ${JSON.stringify(path.resolve('src/index.js'))};
    const body = '{"a":'.repeat(2047) + '1' + '}'.repeat(2047);
    console.log(requestKey({ method: 'POST', url: 'http://a/', user: 'u', authGen: 0, contentType: 'application/json', body }).key);
  `], { encoding: 'utf8' });
  assert.equal(child.status, 0, child.stderr);
  assert.equal(child.stdout.trim(), cKey(nest('{"a":', '}', 2047, '1')).key);
});

test('a NUL in a text field is refused (RequestKeyError naming the field)', () => {
  const get = { method: 'GET', url: 'http://a/', user: 'u', authGen: 0 };
  for (const [bad, field] of [
    [{ user: 'a\0b' }, 'user'], [{ tenant: 't\0' }, 'tenant'], [{ accept: '\0' }, 'accept'],
    [{ locale: 'en\0' }, 'locale'], [{ api: 'v\x001' }, 'api'], [{ freshness: 'cache-ok\0' }, 'freshness'],
    [{ contentType: 'text/plain\0' }, 'contentType'], [{ method: 'G\0T' }, 'method'],
    [{ headers: [['X-A', 'a\0b']] }, 'header'], [{ url: 'http://a/\0' }, 'url'],
  ])
    assert.throws(() => requestKey({ ...get, ...bad }), refused(field), JSON.stringify(bad));
  // other control characters are still encoded, not refused
  assert.match(requestKey({ ...get, user: 'a\x01b' }).canonical, /\|user:a%01b\|/);
});

test('authGen: 2^53-1 is accepted (as libcoord keys it), 2^53 and above refused', () => {
  const get = { method: 'GET', url: 'http://a/', user: 'u' };
  const r = spawnSync(COORDCTL, ['key', '--method', 'GET', '--url', 'http://a/', '--user', 'u', '--auth-gen',
    '9007199254740991'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(requestKey({ ...get, authGen: 2 ** 53 - 1 }).key, r.stdout.trim());
  assert.equal(requestKey({ ...get, authGen: (1n << 53n) - 1n }).key, r.stdout.trim());
  for (const a of [2 ** 53, 1n << 53n, (1n << 64n) - 1n, 1n << 64n])
    assert.throws(() => requestKey({ ...get, authGen: a }), refused('authGen'), String(a));
});

test('URL length: 8,000,000 bytes has a key, 8,000,001 is refused (libcoord\'s limit)', () => {
  const url = (n) => `http://a/${'x'.repeat(n - 9)}`;
  assert.match(requestKey({ method: 'GET', url: url(8000000), user: 'u', authGen: 0 }).key, /^request-v1:[0-9a-f]{64}$/);
  assert.throws(() => requestKey({ method: 'GET', url: url(8000001), user: 'u', authGen: 0 }), refused('url'));
  // counted in UTF-8 bytes: 4,000,000 two-byte characters are too long
  assert.throws(() => requestKey({ method: 'GET', url: `http://a/${'é'.repeat(4000000)}`, user: 'u', authGen: 0 }), refused('url'));
});

test('a NUL after a top-level JSON scalar is refused', () => {
  for (const body of ['1\0', '"a"\0', 'true\0', 'null \0', '{}\0'])
    assert.throws(() => requestKey({ ...base, body }), refused('body'), JSON.stringify(body));
  assert.throws(() => requestKey({ ...base, body: Uint8Array.from([0x31, 0]) }), refused('body'));
});
