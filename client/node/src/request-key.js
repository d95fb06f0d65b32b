// request-key.js - canonical request keys: requestKey({method, url, ...}) →
// {key, canonical}, the same single-flight key for the same HTTP request as
// libcoord's coord_request_key, `coordctl key` and the Python client, byte
// for byte (protocol/PROTOCOL.md, "Canonical request keys"; the precise
// rules and the vectors every client runs: tests/vectors/).
//
// The canonical string (one line, fields joined by "|"):
//   request-v1|<METHOD>|<URL>|body:<hex sha256>|ct:<type>|user:<u>|
//   tenant:<t>|auth:<n>|accept:<a>|locale:<l>|freshness:<f>|api:<v>|
//   h:<name>=<value>,...
// and the key is "request-v1:" + the lower-case hex SHA-256 of its UTF-8.
// The URL is request-url.js's, JSON bodies request-jcs.js's.  Decided as
// the C client does (client/request-key.c):
//   - undefined, null and "" are an absent field, which is its default word
//     (tenant "none" is no tenant); method, url and user are required;
//     authGen is required here too (0 when the user has no credential
//     generation), 0 .. 2^53-1 (a safe integer, or a bigint in that range:
//     every client refuses 2^53 and above, so that all give one answer);
//   - a NUL character in any text field (method, user, tenant, accept,
//     locale, freshness, api, content type, header values) is refused, in
//     every client (C strings cannot hold one);
//   - field values percent-encode "%", "|", ",", "=" and characters below
//     0x20 (upper-case hex); everything else stays (UTF-8 in the hash);
//   - method and header names are HTTP tokens (RFC 9110 tchar); the method
//     is upper-cased, header names lower-cased (ASCII);
//   - headers: values trimmed of spaces and tabs, sorted by name with
//     repeated names in the order given; Authorization,
//     Proxy-Authorization and Cookie are refused;
//   - ct: the media type before ";", trimmed, ASCII lower case; JSON when
//     application/json or a subtype ending in "+json", and then a non-empty
//     body is canonicalized (RFC 8785) before hashing; an empty body is
//     hashed as zero bytes whatever its type;
//   - freshness is exactly cache-ok, revalidate or network-only.
// Strings must be well-formed UTF-16 (a lone surrogate has no UTF-8): else
// the field is refused.  Errors are RequestKeyError (a TypeError) with
// `field`.
import { createHash } from 'node:crypto';
import { RequestKeyError } from './errors.js';
import { normalizeUrl } from './request-url.js';
import { canonicalJson } from './request-jcs.js';

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const REFUSED_HEADERS = new Set(['authorization', 'proxy-authorization', 'cookie']);
const FRESHNESS = new Set(['cache-ok', 'revalidate', 'network-only']);
const AUTH_GEN_MAX = (1n << 53n) - 1n;

const wellFormed = (s) => s.isWellFormed?.() ?? !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);
const sha256hex = (data) => createHash('sha256').update(data).digest('hex');
const upperAscii = (s) => s.replace(/[a-z]/g, (c) => String.fromCharCode(c.charCodeAt(0) - 32));
const lowerAscii = (s) => s.replace(/[A-Z]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 32));
const trimOws = (s) => s.replace(/^[ \t]+|[ \t]+$/g, '');

/** A field value with "%", "|", ",", "=" and controls percent-encoded. */
function field(s) {
  return s.replace(/[\x00-\x1f%|,=]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
}

// The string of an optional text input, or null when absent.
function text(v, name, { required = false } = {}) {
  if (v === undefined || v === null || v === '') {
    if (required) throw new RequestKeyError(name, `${name}: missing`);
    return null;
  }
  if (typeof v !== 'string') throw new RequestKeyError(name, `${name}: must be a string, not ${typeof v}`);
  if (!wellFormed(v)) throw new RequestKeyError(name, `${name}: not well-formed UTF-16 (a lone surrogate)`);
  if (v.includes('\0')) throw new RequestKeyError(name, `${name}: a NUL character is refused`);
  return v;
}

function authGen(v) {
  if (typeof v === 'bigint') {
    if (v < 0n || v > AUTH_GEN_MAX) throw new RequestKeyError('authGen', 'authGen: must be between 0 and 2^53-1');
    return v.toString();
  }
  if (v === undefined || v === null)
    throw new RequestKeyError('authGen', 'authGen: missing (0 when the user has no credential generation)');
  if (!Number.isSafeInteger(v) || v < 0)
    throw new RequestKeyError('authGen', 'authGen: must be an integer between 0 and 2^53-1');
  return String(v);
}

function bodyBytes(b) {
  if (b === undefined || b === null) return null;
  if (typeof b === 'string') {
    if (!wellFormed(b)) throw new RequestKeyError('body', 'body: not well-formed UTF-16 (a lone surrogate)');
    return Buffer.from(b, 'utf8');
  }
  if (b instanceof Uint8Array) return b;
  if (b instanceof ArrayBuffer) return new Uint8Array(b);
  if (ArrayBuffer.isView(b)) return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  throw new RequestKeyError('body', 'body: must be a string (UTF-8), a Uint8Array or an ArrayBuffer');
}

// [[name, value], ...] from an array of pairs, a Map/Headers (iterable of
// pairs) or a plain object.
function headerList(h) {
  if (h === undefined || h === null) return [];
  let pairs;
  if (typeof h[Symbol.iterator] === 'function' && typeof h !== 'string') pairs = [...h];
  else if (typeof h === 'object') pairs = Object.entries(h);
  else throw new RequestKeyError('header', 'headers: must be an array of [name, value] pairs or an object');
  return pairs.map((p, i) => {
    if (!Array.isArray(p) || p.length !== 2)
      throw new RequestKeyError('header', `headers[${i}]: must be a [name, value] pair`);
    const [name, value] = p;
    if (typeof name !== 'string' || !TOKEN.test(name))
      throw new RequestKeyError('header', `header ${String(name).slice(0, 64)}: the name must be an HTTP token`);
    if (REFUSED_HEADERS.has(lowerAscii(name)))
      throw new RequestKeyError('header', `header ${name}: refused: a credential never goes into a key (use the auth generation)`);
    if (typeof value !== 'string') throw new RequestKeyError('header', `header ${name}: the value must be a string`);
    if (!wellFormed(value)) throw new RequestKeyError('header', `header ${name}: not well-formed UTF-16 (a lone surrogate)`);
    if (value.includes('\0')) throw new RequestKeyError('header', `header ${name}: a NUL character in the value is refused`);
    return { name: lowerAscii(name), value: trimOws(value), index: i };
  });
}

const isJsonType = (mt) => lowerAscii(mt) === 'application/json' || (mt.includes('/') && lowerAscii(mt).endsWith('+json'));

/**
 * The canonical request key of an HTTP request: {key, canonical}.  Throws
 * RequestKeyError (field: which input) when the request has no key.
 */
export function requestKey(req) {
  if (req === null || typeof req !== 'object') throw new TypeError('requestKey: expected an object');
  const method = text(req.method, 'method', { required: true });
  if (!TOKEN.test(method)) throw new RequestKeyError('method', 'method: must be an HTTP token');
  const url = text(req.url, 'url', { required: true });
  const user = text(req.user, 'user', { required: true });
  const freshness = text(req.freshness, 'freshness');
  if (freshness !== null && !FRESHNESS.has(freshness))
    throw new RequestKeyError('freshness', `freshness: must be cache-ok, revalidate or network-only, not ${freshness.slice(0, 64)}`);
  const tenant = text(req.tenant, 'tenant');
  const accept = text(req.accept, 'accept');
  const locale = text(req.locale, 'locale');
  const api = text(req.api, 'api');
  const ct = text(req.contentType, 'contentType');
  const body = bodyBytes(req.body);
  const auth = authGen(req.authGen);

  const normUrl = normalizeUrl(url);
  const mt = ct === null ? '' : trimOws(ct.split(';', 1)[0]);
  let bodyField = 'none';
  if (body) {
    const hashed = mt && isJsonType(mt) && body.length > 0 ? canonicalJson(body) : body;
    bodyField = sha256hex(hashed);
  }
  const headers = headerList(req.headers)
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.index - b.index))
    .map((h) => `${field(h.name)}=${field(h.value)}`)
    .join(',');
  const canonical = [
    'request-v1',
    field(upperAscii(method)),
    normUrl,
    `body:${bodyField}`,
    `ct:${mt ? field(lowerAscii(mt)) : 'none'}`,
    `user:${field(user)}`,
    `tenant:${tenant === null ? 'none' : field(tenant)}`,
    `auth:${auth}`,
    `accept:${accept === null ? '*/*' : field(accept)}`,
    `locale:${locale === null ? 'default' : field(locale)}`,
    `freshness:${freshness ?? 'cache-ok'}`,
    `api:${api === null ? 'none' : field(api)}`,
    `h:${headers}`,
  ].join('|');
  return { key: `request-v1:${sha256hex(Buffer.from(canonical, 'utf8'))}`, canonical };
}
