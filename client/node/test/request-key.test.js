// requestKey(): every vector of tests/vectors/request-keys.json (the error
// vectors refused, naming the same field), and the same keys as
// `coordctl key` (libcoord) on inputs the vectors do not cover: hand-picked
// edge cases and a seeded random sample of URLs and JSON bodies.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { requestKey, RequestKeyError } from '../src/index.js';
import { COORDCTL, PKG, tempDir } from '../testlib/broker.js';

const VECTORS = JSON.parse(fs.readFileSync(path.resolve(PKG, '../../tests/vectors/request-keys.json'), 'utf8'));

function fromVector(i) {
  return {
    method: i.method, url: i.url, user: i.user, authGen: i.auth_gen, tenant: i.tenant, accept: i.accept,
    locale: i.locale, freshness: i.freshness, api: i.api, contentType: i.content_type, headers: i.headers,
    body: i.body_base64 !== undefined ? Buffer.from(i.body_base64, 'base64') : i.body,
  };
}

test('request-keys.json: the format and the number of vectors', () => {
  assert.equal(VECTORS.format, 'coord request-key vectors 1');
  assert.ok(VECTORS.vectors.length >= 99);
  assert.ok(VECTORS.vectors.some((v) => v.error));
});

for (const v of VECTORS.vectors) {
  test(`vector: ${v.name}`, () => {
    const req = fromVector(v.input);
    if (v.error) {
      // the vectors name fields as the protocol does (auth_gen), Node as its API does (authGen)
      const camel = v.error_field.replace(/_([a-z])/g, (_, ch) => ch.toUpperCase());
      assert.throws(() => requestKey(req), (e) => e instanceof RequestKeyError && e instanceof TypeError &&
        (e.field === v.error_field || e.field === camel) && e.message.length > 0);
      return;
    }
    const r = requestKey(req);
    assert.equal(r.canonical, v.canonical);
    assert.equal(r.key, v.key);
    assert.match(r.key, /^request-v1:[0-9a-f]{64}$/);
  });
}

test('inputs: headers as an object or a Map, bodies as bytes, bigint authGen, type errors', () => {
  const base = { method: 'GET', url: 'https://example.com/', user: 'u1', authGen: 1 };
  const pairs = requestKey({ ...base, headers: [['X-A', '1'], ['x-b', '2']] });
  assert.equal(requestKey({ ...base, headers: { 'x-b': '2', 'X-A': '1' } }).key, pairs.key);
  assert.equal(requestKey({ ...base, headers: new Map([['X-A', '1'], ['x-b', '2']]) }).key, pairs.key);
  const text = requestKey({ ...base, method: 'POST', body: '{"a":1}', contentType: 'application/json' });
  assert.equal(requestKey({ ...base, method: 'POST', body: new TextEncoder().encode('{ "a" : 1 }'),
    contentType: 'application/json' }).key, text.key);
  assert.equal(requestKey({ ...base, authGen: 1n }).key, requestKey(base).key);
  assert.match(requestKey({ ...base, authGen: (1n << 53n) - 1n }).canonical, /\|auth:9007199254740991\|/);
  for (const [bad, field] of [
    [{ authGen: undefined }, 'authGen'], [{ authGen: -1 }, 'authGen'], [{ authGen: 1.5 }, 'authGen'],
    [{ authGen: 1n << 64n }, 'authGen'], [{ authGen: 1n << 53n }, 'authGen'], [{ user: 7 }, 'user'], [{ url: '\uD800' }, 'url'],
    [{ tenant: 'a\uDC00' }, 'tenant'], [{ body: 42 }, 'body'], [{ body: 'x\uD800' }, 'body'],
    [{ headers: [['X-A']] }, 'header'], [{ headers: [['X-A', 1]] }, 'header'],
    [{ method: 'POST', contentType: 'application/json', body: Uint8Array.from([0x22, 0xc3, 0x22]) }, 'body'],
  ]) {
    assert.throws(() => requestKey({ ...base, ...bad }), (e) => e instanceof RequestKeyError && e.field === field,
      JSON.stringify(bad, (k, x) => (typeof x === 'bigint' ? `${x}n` : x)));
  }
  assert.throws(() => requestKey(null), TypeError);
});

// ---- the same keys as coordctl key (libcoord) ----

const run = promisify(execFile);
const dir = tempDir('coord-node-rk-');
let files = 0;
after(() => fs.rmSync(dir, { recursive: true, force: true }));

async function viaC({ url, body, contentType = 'application/json', headers = [], method = 'GET' }) {
  const args = ['--json', 'key', '--method', method, '--user', 'u', '--auth-gen', '1', '--url', url, '--explain'];
  for (const [n, v] of headers) args.push('--header', `${n}:${v}`);
  if (body !== undefined) {
    const f = path.join(dir, `b${files++}`);
    fs.writeFileSync(f, body);
    args.push('--content-type', contentType, '--body-file', f);
  }
  try {
    return JSON.parse((await run(COORDCTL, args)).stdout);
  } catch (e) {
    if (e.code !== 2) throw e;               // 2: the request has no key
    return { error: e.stderr.trim() };
  }
}

function viaJs({ url, body, contentType = 'application/json', headers = [], method = 'GET' }) {
  try {
    return requestKey({ method, url, user: 'u', authGen: 1, headers, body,
      contentType: body === undefined ? undefined : contentType });
  } catch (e) {
    if (!(e instanceof RequestKeyError)) throw e;
    return { error: e.message };
  }
}

async function compare(cases) {
  const differ = [];
  let accepted = 0;
  for (let i = 0; i < cases.length; i += 16) {
    await Promise.all(cases.slice(i, i + 16).map(async (c) => {
      const [cr, jr] = [await viaC(c), viaJs(c)];
      if (!cr.error) accepted++;
      if (!!cr.error !== !!jr.error || (!cr.error && (cr.key !== jr.key || cr.canonical !== jr.canonical)))
        differ.push({ input: c, c: cr.error ?? cr.canonical, js: jr.error ?? jr.canonical });
    }));
  }
  assert.deepEqual(differ, []);
  return accepted;
}

const EDGE_URLS = [
  'http://a!b.com/', 'http://a$b/', 'http://a_b~c/', 'http://ex%2Dample/', 'http://h:0/', 'http://h:00080/',
  'http://[2001:0db8::1]/', 'http://[2001:db8:0:0:0:0:0:1]/', 'http://[::ffff:102:304]/', 'http://[::ffff:1.2.3.4]/',
  'http://[0:0::1]/', 'http://[::1]x/', 'http://[::]/', 'http://[1:2:3:4:5:6:7::]/', 'http://[1::2:3:4:5:6:7]/',
  'http://[::1.2.3.4]/', 'http://[::0.0.0.1]/', 'http://[1:0:0:2:0:0:0:3]/', 'http://[::FFFF:1.2.3.4]/', 'http://[0::]/',
  'http://[1:2:3:4:5:6:7:8:9]/', 'http://[12345::]/', 'http://[::1.2.3.04]/', 'http://[1::2::3]/', 'http://[1:]/',
  'http://h/ ', 'http://h/a b', 'http://1.2.3.4./', 'http://h.0x/', 'http://h.0xfg/', 'http://h:+80/', 'http:///h',
  'http://h:8080:90/', 'http://h/a%00b', 'http://h/#%zz', 'http://h/?a=%zz', 'http://H%41/', 'http://a..b/',
  'http://.a/', 'http://h/a\tb', 'http://h/\x7f', 'HtTpS://H/%7e?%7E=%7e', 'http://h?', 'http://h#', 'http://h:/?#',
  'http://h/./../a/./b/../c/.', 'http://h/a/..//b', 'http://h/%2e%2e%2f', 'http://h/?b&a=&a&=&==',
  `http://h/${'é'.repeat(50)}?${'ü'.repeat(20)}`, 'https://xn--bcher-kva.example/',
];
const EDGE_BODIES = [
  '01', '1.', '.5', '-', '[1,]', '{"a":1 "b":2}', '\ufeff{}', '"\\u00e9"', '"a\\u0000b"', '{"\\u0000":1}',
  '"\\ud800\\udc00"', '"\\udc00"', '"\\ud800x"', '"\t"', '5e-324', '1E+2', '-0.0e0', 'tru', ' ', '[1e400]',
  '{"__proto__":1,"a":{"__proto__":2}}', '"\\/"', '\x7f', '"\\u007F"', '[1e-7,1e21,1e20,0.000001,-1.5e-9]',
  '{"b":[{"d":1,"c":2}],"a":null}', '"\\uD83D\\uDE00\\uE000"', '\n\r\t 1 \n', '[9007199254740993]', '2.5E-324',
  `${'['.repeat(2047)}1${']'.repeat(2047)}`, `${'['.repeat(2048)}1${']'.repeat(2048)}`,
  `${'['.repeat(2048)}${']'.repeat(2048)}`, `${'['.repeat(2049)}${']'.repeat(2049)}`,
];

test('the same as coordctl key: URL and JSON edge cases, headers', async () => {
  const cases = [...EDGE_URLS.map((url) => ({ url })), ...EDGE_BODIES.map((body) => ({ url: 'http://h/', body })),
    { url: 'http://h/', body: Uint8Array.from([0x5b, 0xed, 0xa0, 0x80, 0x5d]) },     // an encoded surrogate
    { url: 'http://h/', body: 'x', contentType: 'text/x+json' },
    { url: 'http://h/', body: '{"b":1,"a":2}', contentType: 'application/vnd.api+JSON; x=1' },
    { url: 'http://h/', body: '{"b":1,"a":2}', contentType: ' ;application/json' },
    { url: 'http://h/', headers: [['X-A', '  a, b=c|d%e\t '], ['x-a', 'z'], ['A', '']] },
    { url: 'http://h/', headers: [['Cookie', 'x']] }, { url: 'http://h/', method: 'g|et' },
  ];
  assert.ok(await compare(cases) > 40);
});

test('the same as coordctl key: a seeded random sample of URLs and JSON bodies', async () => {
  let seed = 20240601;
  const rnd = (n) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; };
  const pick = (a) => a[rnd(a.length)];
  const many = (bits, max) => Array.from({ length: rnd(max) }, () => pick(bits)).join('');
  const hostBits = ['a', 'B', '.', '0', '1', '255', '256', '0x', 'f', '%41', '%2e', '%2D', '%zz', '%', '-', '_', '~', '!',
    'é', '[', ']', ':', '01', '9'];
  const ipv6Bits = ['0', '1', 'ffff', 'FfFf', '0db8', ':', '::', '1.2.3.4', '.', '12345', '%25', 'g', '0:0'];
  const pathBits = ['/', 'a', '.', '..', '%2e', '%2E', '%2f', '%7e', '%41', '%zz', '%4', ' ', '"', '|', '\\', 'é', ':',
    '@', '!', '$', ';', '=', '+', '&', '{', '`', '^', '//', '?', '#', '%00', '\u{1F600}'];
  const jsonBits = ['{', '}', '[', ']', ',', ':', '"a"', '"b"', '"\\u0061"', '1', '-0', '1e400', '1e-400', '0.1', '01',
    'true', 'nul', ' ', '"\\ud800"', '"\\ud83d\\ude00"', '"\\u0000"', '"é"', '\t', '"x\\n"', '1.5e3', '-', '2e+2'];
  const cases = [];
  for (let i = 0; i < 240; i++) {
    if (rnd(3) === 0) {
      cases.push({ url: 'http://h/', body: many(jsonBits, 9) || '1' });
      continue;
    }
    const k = rnd(4);
    const host = k === 0 ? many(hostBits, 6) : k === 1 ? `[${many(ipv6Bits, 9)}]`
      : k === 2 ? Array.from({ length: 4 }, () => pick(['0', '1', '255', '256', '01', ''])).join(pick(['.', '.', '..']))
        : pick(['example.com', 'Ex.COM', 'h', 'a.b.', '1.2.3.4']);
    const port = pick(['', '', ':', ':80', ':443', ':0', ':0080', ':65535', ':65536', ':8a', ':+1']);
    cases.push({ url: `${pick(['http', 'HTTPS', 'hTtP'])}://${pick(['', '', '', 'u@'])}${host}${port}${many(pathBits, 7)}` });
  }
  assert.ok(await compare(cases) > 30);
});
