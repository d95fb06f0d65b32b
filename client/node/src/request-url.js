// request-url.js - the <URL> of a canonical request key: RFC 3986 §6.2.2
// (syntax-based) and §6.2.3 (scheme-based) normalization of an absolute
// http(s) URL, without its fragment, exactly as libcoord does it
// (client/request-url.c, which splits with libcurl and then normalizes).
//
// WHATWG `URL` is not used: it normalizes differently (it rewrites "127.1"
// as 127.0.0.1, turns "\" into "/", decodes no unreserved escape, keeps a
// default port off only for special schemes, ...).  This is a small parser
// of its own, written to give what the C client gives, the libcurl checks
// included, on every input (tests/vectors/request-keys.json and the
// differential test against `coordctl key`):
//
//   whole URL  at most 8,000,000 bytes (libcurl's limit); no byte below 0x20
//              and no DEL anywhere (libcurl refuses them; spaces are allowed
//              and encoded later);
//   scheme     letters, digits, "+-." then ":"; only http or https (any
//              case), followed by "//" (else "not absolute");
//   userinfo   any "@" in the authority is refused (a credential);
//   host       reg-name: unreserved characters and percent-encoded
//              unreserved characters (decoded), lower-cased.  Sub-delims
//              (libcurl: "Bad hostname"), other escapes, non-ASCII (write
//              the xn-- form) are refused.  A host whose last label
//              (ignoring one trailing dot) is digits, or "0x" and hex
//              digits, must be four decimal parts 0-255 without leading
//              zeros, with no trailing dot;
//              IP literal: "[" IPv6 "]" as glibc's inet_pton reads it, no
//              zone id, lower-cased; refused when inet_ntop's form is
//              shorter than what is written (libcurl then rewrites it and
//              libcoord refuses the host as not canonical);
//   port       digits only, at most 65535, written without leading zeros;
//              dropped when empty or the scheme's default (80, 443);
//   path       percent-encoding normalized (unreserved decoded, other hex
//              upper-cased; a "%" without two hex digits is refused), bytes
//              outside RFC 3986's path characters percent-encoded (as their
//              UTF-8 bytes), dot segments removed (§5.2.4); empty is "/";
//   query      split on "&", empty pieces dropped, each normalized as the
//              path ("?" allowed too, "+" stays "+"), sorted by name (the
//              bytes before the first "="), then pieces without "=" first,
//              then by value; no "?" when nothing is left;
//   fragment   dropped (not looked at).
//
// Work is done on a "byte string": the URL's UTF-8 bytes, one char per byte
// (latin1), so that the rules read like the C; the result is ASCII.
import { RequestKeyError } from './errors.js';

// libcurl's CURL_MAX_INPUT_LENGTH.
const MAX_URL_BYTES = 8000000;

const isAlpha = (c) => (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
const isDigit = (c) => c >= 0x30 && c <= 0x39;
const isUnreserved = (c) => isAlpha(c) || isDigit(c) || c === 0x2d || c === 0x2e || c === 0x5f || c === 0x7e;
const SUB_DELIMS = new Set([...'!$&\'()*+,;='].map((ch) => ch.charCodeAt(0)));
const isPathChar = (c) => isUnreserved(c) || SUB_DELIMS.has(c) || c === 0x3a || c === 0x40 || c === 0x2f;
const isQueryChar = (c) => isPathChar(c) || c === 0x3f;
const HEX = '0123456789ABCDEF';

function hexVal(c) {
  if (isDigit(c)) return c - 0x30;
  c |= 0x20;
  return c >= 0x61 && c <= 0x66 ? c - 0x61 + 10 : -1;
}

const pct = (c) => `%${HEX[c >> 4]}${HEX[c & 15]}`;
const lowerAscii = (s) => s.replace(/[A-Z]/g, (ch) => String.fromCharCode(ch.charCodeAt(0) + 32));

function fail(why) {
  return new RequestKeyError('url', `url: ${why}`);
}

// s with its percent-encoding normalized and the bytes allowed() refuses encoded.
function normPct(s, allowed, what) {
  let out = '';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x25) {
      const hi = i + 1 < s.length ? hexVal(s.charCodeAt(i + 1)) : -1;
      const lo = i + 2 < s.length ? hexVal(s.charCodeAt(i + 2)) : -1;
      if (hi < 0 || lo < 0) throw fail(`a % not followed by two hex digits in the ${what}`);
      const d = hi * 16 + lo;
      out += isUnreserved(d) ? String.fromCharCode(d) : pct(d);
      i += 2;
    } else if (allowed(c)) {
      out += s[i];
    } else {
      out += pct(c);
    }
  }
  return out;
}

/** RFC 3986 §5.2.4 on an absolute path (starts with "/"). */
export function removeDotSegments(input) {
  let out = '';
  let i = 0;
  const n = input.length;
  const at = (str) => input.startsWith(str, i);
  while (i < n) {
    const left = n - i;
    if (at('../')) i += 3;                                 // A
    else if (at('./')) i += 2;                             // A
    else if (at('/./')) i += 2;                            // B
    else if (left === 2 && at('/.')) { out += '/'; i += 2; } // B
    else if (at('/../') || (left === 3 && at('/..'))) {   // C
      const cut = out.lastIndexOf('/');
      out = cut < 0 ? '' : out.slice(0, cut);
      if (left === 3) out += '/';
      i += 3;
    } else if ((left === 1 && at('.')) || (left === 2 && at('..'))) {
      i += left;                                           // D
    } else {                                               // E
      let j = i + 1;
      while (j < n && input[j] !== '/') j++;
      out += input.slice(i, j);
      i = j;
    }
  }
  return out;
}

function pieceCmp(a, b) {
  if (a.name !== b.name) return a.name < b.name ? -1 : 1;
  if (a.hasValue !== b.hasValue) return a.hasValue ? 1 : -1;
  return a.value < b.value ? -1 : a.value > b.value ? 1 : 0;
}

function normQuery(q) {
  const pieces = [];
  for (const raw of q.split('&')) {
    if (!raw) continue;
    const p = normPct(raw, isQueryChar, 'query');
    const eq = p.indexOf('=');
    pieces.push({ text: p, name: eq < 0 ? p : p.slice(0, eq), hasValue: eq >= 0, value: eq < 0 ? '' : p.slice(eq + 1) });
  }
  if (!pieces.length) return '';
  pieces.sort(pieceCmp);
  return `?${pieces.map((p) => p.text).join('&')}`;
}

// ---- the host ----

function numericLastLabel(h) {
  let n = h.length;
  if (n && h[n - 1] === '.') n--;
  const l = h.slice(h.lastIndexOf('.', n - 1) + 1, n);
  if (!l.length) return false;
  if (l.length >= 2 && l[0] === '0' && l[1] === 'x') return /^[0-9a-f]*$/.test(l.slice(2));
  return /^[0-9]+$/.test(l);
}

const dottedQuad = (h) => /^(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})$/.test(h) &&
  h.split('.').every((p) => Number(p) <= 255);

// glibc's inet_pton4 on s (the tail of an IPv6 literal): 4 bytes or null.
function pton4(s) {
  const out = [0];
  let sawDigit = false, octets = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (isDigit(c)) {
      const v = out[out.length - 1] * 10 + (c - 0x30);
      if (sawDigit && out[out.length - 1] === 0) return null;
      if (v > 255) return null;
      out[out.length - 1] = v;
      if (!sawDigit) {
        if (++octets > 4) return null;
        sawDigit = true;
      }
    } else if (c === 0x2e && sawDigit) {
      if (octets === 4) return null;
      out.push(0);
      sawDigit = false;
    } else {
      return null;
    }
  }
  return octets < 4 ? null : out;
}

// glibc's inet_pton6: 16 bytes or null.
function pton6(s) {
  const tmp = new Array(16).fill(0);
  let tp = 0, colonp = -1, i = 0;
  if (!s.length) return null;
  if (s[0] === ':') {
    i++;
    if (i === s.length || s[i] !== ':') return null;
  }
  let curtok = i, xdigits = 0, val = 0;
  while (i < s.length) {
    const c = s.charCodeAt(i++);
    const d = hexVal(c);
    if (d >= 0) {
      if (xdigits === 4) return null;
      val = (val << 4) | d;
      if (val > 0xffff) return null;
      xdigits++;
      continue;
    }
    if (c === 0x3a) {
      curtok = i;
      if (xdigits === 0) {
        if (colonp >= 0) return null;
        colonp = tp;
        continue;
      } else if (i === s.length) {
        return null;
      }
      if (tp + 2 > 16) return null;
      tmp[tp++] = val >> 8;
      tmp[tp++] = val & 0xff;
      xdigits = 0;
      val = 0;
      continue;
    }
    if (c === 0x2e && tp + 4 <= 16) {
      const v4 = pton4(s.slice(curtok));
      if (v4) {
        for (const b of v4) tmp[tp++] = b;
        xdigits = 0;
        break;
      }
    }
    return null;
  }
  if (xdigits > 0) {
    if (tp + 2 > 16) return null;
    tmp[tp++] = val >> 8;
    tmp[tp++] = val & 0xff;
  }
  if (colonp >= 0) {
    if (tp === 16) return null;
    const n = tp - colonp;
    const moved = tmp.slice(colonp, tp);
    for (let k = colonp; k < 16; k++) tmp[k] = 0;
    for (let k = 0; k < n; k++) tmp[16 - n + k] = moved[k];
    tp = 16;
  }
  return tp === 16 ? tmp : null;
}

// glibc's inet_ntop6.
function ntop6(b) {
  const w = [];
  for (let i = 0; i < 16; i += 2) w.push((b[i] << 8) | b[i + 1]);
  let best = { base: -1, len: 0 }, cur = { base: -1, len: 0 };
  for (let i = 0; i < 8; i++) {
    if (w[i] === 0) {
      if (cur.base === -1) cur = { base: i, len: 1 }; else cur.len++;
    } else if (cur.base !== -1) {
      if (best.base === -1 || cur.len > best.len) best = cur;
      cur = { base: -1, len: 0 };
    }
  }
  if (cur.base !== -1 && (best.base === -1 || cur.len > best.len)) best = cur;
  if (best.base !== -1 && best.len < 2) best = { base: -1, len: 0 };
  let s = '';
  for (let i = 0; i < 8; i++) {
    if (best.base !== -1 && i >= best.base && i < best.base + best.len) {
      if (i === best.base) s += ':';
      continue;
    }
    if (i !== 0) s += ':';
    if (i === 6 && best.base === 0 && (best.len === 6 || (best.len === 5 && w[5] === 0xffff))) {
      s += `${b[12]}.${b[13]}.${b[14]}.${b[15]}`;
      return s;
    }
    s += w[i].toString(16);
  }
  if (best.base !== -1 && best.base + best.len === 8) s += ':';
  return s;
}

function normIpLiteral(h) {
  // h is "[...]" (the closing bracket checked by the caller)
  const addr = h.slice(1, -1);
  if (addr.includes('%')) throw fail('IPv6 zone ids are refused');
  if (!/^[0-9a-fA-F:.]*$/.test(addr) || h.length < 4) throw fail(`bad IPv6 address ${h.slice(0, 64)}`);
  const bytes = pton6(addr);
  if (!bytes) throw fail(`not a valid URL (bad IPv6 address ${h.slice(0, 64)})`);
  const norm = ntop6(bytes);
  if (norm.length < addr.length) throw fail(`host ${h.slice(0, 64)} is not in a canonical form (read as [${norm}])`);
  return lowerAscii(h);
}

function normRegName(raw) {
  let h = '';
  for (let i = 0; i < raw.length; i++) {
    let c = raw.charCodeAt(i);
    if (c === 0x25) {
      const hi = i + 1 < raw.length ? hexVal(raw.charCodeAt(i + 1)) : -1;
      const lo = i + 2 < raw.length ? hexVal(raw.charCodeAt(i + 2)) : -1;
      const d = hi * 16 + lo;
      if (hi < 0 || lo < 0 || !isUnreserved(d))
        throw fail('percent-encoded bytes in the host are refused (only unreserved characters may be encoded)');
      c = d;
      i += 2;
    } else if (c >= 0x80) {
      throw fail('the host must be ASCII (write an internationalized name in its xn-- form)');
    } else if (SUB_DELIMS.has(c)) {
      throw fail('not a valid URL (Bad hostname)');
    } else if (!isUnreserved(c)) {
      throw fail(`bad character '${String.fromCharCode(c)}' in the host`);
    }
    h += String.fromCharCode(c >= 0x41 && c <= 0x5a ? c + 32 : c);
  }
  if (numericLastLabel(h) && !dottedQuad(h))
    throw fail(`host ${h.slice(0, 64)}: an IPv4 address must be four decimal parts 0-255 without leading zeros`);
  return h;
}

/** The normalized URL of the canonical string; throws RequestKeyError('url'). */
export function normalizeUrl(url) {
  const bytes = Buffer.from(url, 'utf8');
  if (bytes.length > MAX_URL_BYTES) throw fail('not a valid URL (longer than 8000000 bytes)');
  const s = bytes.toString('latin1');
  if (/[\x00-\x1f\x7f]/.test(s)) throw fail('not a valid URL (a control character)');
  const m = /^[A-Za-z][A-Za-z0-9+.-]*/.exec(s);
  if (!m) throw fail('must be absolute: http://host/... or https://host/...');
  const schemeLower = lowerAscii(m[0]);
  if ((schemeLower !== 'http' && schemeLower !== 'https') || s[m[0].length] !== ':')
    throw fail('the scheme must be http or https');
  const https = schemeLower === 'https';
  if (!s.startsWith('://', m[0].length)) throw fail(`must be absolute: ${schemeLower}://host/...`);
  let rest = s.slice(m[0].length + 3);
  const hash = rest.indexOf('#');
  if (hash >= 0) rest = rest.slice(0, hash);
  const authEnd = rest.search(/[/?]/);
  const auth = authEnd < 0 ? rest : rest.slice(0, authEnd);
  rest = authEnd < 0 ? '' : rest.slice(authEnd);
  if (auth.includes('@')) throw fail('user information (user:password@) is refused: a credential never goes into a key');
  if (!auth.length) throw fail('no host');

  let host, port = null;
  if (auth[0] === '[') {
    const close = auth.indexOf(']');
    if (close < 0) throw fail(`not a valid URL (bad IPv6 address ${auth.slice(0, 64)})`);
    const after = auth.slice(close + 1);
    if (after && after[0] !== ':') throw fail('not a valid URL (bad port number)');
    if (after) port = after.slice(1);
    host = normIpLiteral(auth.slice(0, close + 1));
  } else {
    const colon = auth.indexOf(':');
    if (colon >= 0) port = auth.slice(colon + 1);
    host = normRegName(colon >= 0 ? auth.slice(0, colon) : auth);
    if (!host) throw fail('no host');
  }
  let out = `${schemeLower}://${host}`;
  if (port) {
    if (!/^[0-9]+$/.test(port) || Number(port) > 65535)
      throw fail('not a valid URL (Port number was not a decimal number between 0 and 65535)');
    const pv = Number(port);
    if (pv !== (https ? 443 : 80)) out += `:${pv}`;
  }
  const q = rest.indexOf('?');
  const rawPath = q < 0 ? rest : rest.slice(0, q);
  const path = normPct(rawPath || '/', isPathChar, 'path');
  const dotless = removeDotSegments(path[0] === '/' ? path : `/${path}`);
  out += dotless || '/';
  if (q >= 0) out += normQuery(rest.slice(q + 1));
  return out;
}
