// wire.js - frames and MessagePack for the coord protocol (protocol/PROTOCOL.md).
//
// A frame is a 4-byte big-endian length, then one MessagePack map with string
// keys.  We do the framing ourselves and hand @msgpack/msgpack one whole frame
// at a time.  Two traps of the codec are handled here:
//   - integers: it encodes safe integers >= 2^32 as uint64 and decodes uint64
//     as Number; ids (tokens, fences, generations) are below 2^53 by the
//     protocol, so any integer that is not a safe integer is refused
//     (useBigInt64 stays off: it would encode Numbers >= 2^32 as floats).
//   - strings: the broker returns names as MessagePack str holding whatever
//     bytes the name has (a WTF-8 name from us, any bytes from a C client).
//     The codec's own UTF-8 decoder is lossy past 200 bytes (TextDecoder), so
//     frames are decoded with rawStrings and every str is turned into a JS
//     string here with a WTF-8 decoder, except the payload fields (BYTE_FIELDS)
//     which stay Uint8Array.
// Names go out as str when they are well-formed UTF-16, else as bin holding
// their WTF-8 bytes (lone surrogates encoded as 3-byte sequences), so that two
// different JS strings never name one lock and a name round-trips exactly.
// The hot path bypasses the codec where it can and must agree with it byte
// for byte (encodeRequest, decodeFlat: see "the hot path" below; tested in
// test/wire-fast.test.js).
import { Decoder, Encoder } from '@msgpack/msgpack';
import { CoordError } from './errors.js';

// Fields whose value is a payload (bin) and must stay bytes.
const BYTE_FIELDS = new Set(['result', 'data', 'value']);

// The largest frame we accept before hello tells us the broker's max_frame.
// The broker's default is 1 MiB; 16 MiB leaves room for a broker started with
// a larger limit while still refusing a garbage length at once.
export const DEFAULT_MAX_FRAME = 16 * 1024 * 1024;

// The protocol's cap on max_frame (PROTOCOL.md, "Sizes": `--max-frame` is at
// most 64 MiB).  A hello reply announcing more is refused: what a broker
// announces is how much this client agrees to buffer for one frame.
export const PROTOCOL_MAX_FRAME = 64 * 1024 * 1024;

// The protocol's nesting limit (PROTOCOL.md, "Encoding": reply map -> array
// -> entry map; libcoord's COORD_MAX_DEPTH), applied to what we decode.
export const MAX_DEPTH = 3;

const frameEncoder = new Encoder({ ignoreUndefined: true });
const frameDecoder = new Decoder({ rawStrings: true });

// ---- WTF-8 ----

/** Encodes any JS string, lone surrogates included, as WTF-8 bytes. */
export function wtf8Encode(s) {
  const out = [];
  for (let i = 0; i < s.length; i++) {
    let c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
      }
    }
    if (c < 0x80) out.push(c);
    else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return Uint8Array.from(out);
}

/** Decodes UTF-8 or WTF-8 (encoded surrogates become lone code units); a byte
 * that starts no valid sequence becomes U+FFFD. */
export function wtf8Decode(b) {
  let s = '';
  const units = [];
  const flush = () => { s += String.fromCharCode.apply(null, units); units.length = 0; };
  for (let i = 0; i < b.length;) {
    const x = b[i];
    let cp = -1, n = 0;
    if (x < 0x80) { cp = x; n = 1; }
    else if (x >= 0xc2 && x < 0xe0) { n = 2; cp = x & 0x1f; }
    else if (x >= 0xe0 && x < 0xf0) { n = 3; cp = x & 0x0f; }
    else if (x >= 0xf0 && x < 0xf5) { n = 4; cp = x & 0x07; }
    if (n > 1) {
      if (i + n > b.length) n = 0;
      for (let k = 1; k < n; k++) {
        const y = b[i + k];
        if ((y & 0xc0) !== 0x80) { n = 0; break; }
        cp = (cp << 6) | (y & 63);
      }
      if ((n === 3 && cp < 0x800) || (n === 4 && (cp < 0x10000 || cp > 0x10ffff))) n = 0;
    }
    if (n === 0) { units.push(0xfffd); i++; }
    else if (cp >= 0x10000) {
      cp -= 0x10000;
      units.push(0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
      i += n;
    } else { units.push(cp); i += n; }
    if (units.length >= 4096) flush();
  }
  flush();
  return s;
}

const isWellFormed = typeof String.prototype.isWellFormed === 'function'
  ? (s) => s.isWellFormed()
  : (s) => !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);

/** The wire form of a name: the string itself when well-formed, else its
 * WTF-8 bytes (sent as bin). */
export function wireName(s) {
  return isWellFormed(s) ? s : wtf8Encode(s);
}

/** Bytes of a name as the broker counts them (for length checks). */
export function nameBytes(s) {
  return isWellFormed(s) ? Buffer.byteLength(s, 'utf8') : wtf8Encode(s).length;
}

// ---- frames ----

/** One request map as a frame (length + body). */
export function encodeFrame(map) {
  const body = frameEncoder.encode(map);
  const frame = Buffer.allocUnsafe(4 + body.length);
  frame.writeUInt32BE(body.length, 0);
  frame.set(body, 4);
  return frame;
}

// ---- the hot path: flat requests and replies without the codec ----
//
// Almost every request is a flat map of ASCII strings, integers and
// booleans ({op, rid, name, mode}, {op, rid, lock}), and almost every reply
// a flat map of the same.  encodeRequest writes such a request straight
// into a scratch buffer, byte for byte what the codec writes (the same
// smallest int forms, fixstr/str8/str16, fixmap/map16), and hands the codec
// anything else (bytes, nested values, floats, non-ASCII strings);
// decodeFlat reads such a reply in one pass, and returns undefined for
// anything else, which decodeFrame then checks and decodes as before.
// The codec's walk, its decode and convert() cost ~2 us per request and
// reply on a 2-vCPU VM, about 4 us of a ~35 us lock cycle from Node.

let scratch = Buffer.allocUnsafe(256);

// Writes a value at p, returns the new offset, or -1 when the codec must
// do it (undefined is filtered by the caller).
function putScalar(b, p, v) {
  if (typeof v === 'string') {
    const n = v.length;
    if (n < 32) b[p++] = 0xa0 | n;
    else if (n < 0x100) { b[p++] = 0xd9; b[p++] = n; }
    else if (n < 0x10000) { b[p++] = 0xda; b[p++] = n >> 8; b[p++] = n & 255; }
    else return -1;
    for (let i = 0; i < n; i++) {
      const c = v.charCodeAt(i);
      if (c >= 0x80) return -1;        // the codec's UTF-8 (and its length) then
      b[p++] = c;
    }
    return p;
  }
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v)) return -1;
    if (v >= 0) {
      if (v < 0x80) b[p++] = v;
      else if (v < 0x100) { b[p++] = 0xcc; b[p++] = v; }
      else if (v < 0x10000) { b[p++] = 0xcd; b.writeUInt16BE(v, p); p += 2; }
      else if (v < 0x100000000) { b[p++] = 0xce; b.writeUInt32BE(v, p); p += 4; }
      else { b[p++] = 0xcf; b.writeUInt32BE(Math.floor(v / 0x100000000), p); b.writeUInt32BE(v >>> 0, p + 4); p += 8; }
    } else if (v >= -0x20) b[p++] = 0xe0 | (v + 0x20);
    else if (v >= -0x80) { b[p++] = 0xd0; b.writeInt8(v, p); p += 1; }
    else if (v >= -0x8000) { b[p++] = 0xd1; b.writeInt16BE(v, p); p += 2; }
    else if (v >= -0x80000000) { b[p++] = 0xd2; b.writeInt32BE(v, p); p += 4; }
    else return -1;
    return p;
  }
  if (v === true) { b[p++] = 0xc3; return p; }
  if (v === false) { b[p++] = 0xc2; return p; }
  if (v === null) { b[p++] = 0xc0; return p; }
  return -1;
}

/** The frame of request {op, rid, ...fields} (fields' undefined members
 * left out), the same bytes as encodeFrame({op, rid, ...fields}). */
export function encodeRequest(op, rid, fields) {
  const keys = Object.keys(fields);
  let n = 2;
  let clash = false;                    // a field named op or rid: the codec's spread then
  let need = op.length + 32;            // 9 bytes a key or scalar at most, beside their characters
  for (const k of keys) {
    const v = fields[k];
    if (v === undefined) continue;
    if (k === 'op' || k === 'rid') clash = true;
    n++;
    need += 18 + k.length + (typeof v === 'string' ? v.length : 0);
  }
  if (!clash && n < 0x10000 && need <= 0x10000) {
    if (scratch.length < need) scratch = Buffer.allocUnsafe(Math.max(need, scratch.length * 2));
    const b = scratch;
    let p = 4;
    if (n < 16) b[p++] = 0x80 | n;
    else { b[p++] = 0xde; b[p++] = n >> 8; b[p++] = n & 255; }
    p = putScalar(b, p, 'op');
    p = putScalar(b, p, op);
    if (p >= 0) p = putScalar(b, p, 'rid');
    if (p >= 0) p = putScalar(b, p, rid);
    for (let i = 0; i < keys.length && p >= 0; i++) {
      const v = fields[keys[i]];
      if (v === undefined) continue;
      p = putScalar(b, p, keys[i]);
      if (p >= 0) p = putScalar(b, p, v);
    }
    if (p >= 0) {
      const frame = Buffer.allocUnsafe(p);
      b.copy(frame, 0, 0, p);
      frame.writeUInt32BE(p - 4, 0);
      return frame;
    }
  }
  return encodeFrame({ op, rid, ...fields });
}

// A flat reply: a map of ASCII str keys to nil, booleans, integers, floats
// and str (not a payload field), nothing after it.  The object, or
// undefined for anything else (decodeFrame's full path then judges it).
function decodeFlat(b) {
  const end = b.length;
  let p = 0;
  const x = b[p++];
  let n;
  if (x >= 0x80 && x <= 0x8f) n = x & 15;
  else if (x === 0xde && end >= 3) { n = (b[1] << 8) | b[2]; p = 3; } else return undefined;
  const o = {};
  for (let i = 0; i < n; i++) {
    // key: an ASCII fixstr or str8
    if (p >= end) return undefined;
    let t = b[p++], len;
    if (t >= 0xa0 && t <= 0xbf) len = t & 31;
    else if (t === 0xd9 && p < end) len = b[p++];
    else return undefined;
    if (p + len > end) return undefined;
    for (let k = p; k < p + len; k++) if (b[k] >= 0x80) return undefined;
    const key = b.latin1Slice(p, p + len);
    p += len;
    if (key === '__proto__' || p >= end) return undefined;
    t = b[p++];
    let v;
    if (t <= 0x7f) v = t;
    else if (t >= 0xe0) v = t - 0x100;
    else if (t >= 0xa0 && t <= 0xbf || t === 0xd9 || t === 0xda) {
      if (BYTE_FIELDS.has(key)) return undefined;
      if (t <= 0xbf) len = t & 31;
      else if (t === 0xd9) { if (p >= end) return undefined; len = b[p++]; }
      else { if (p + 2 > end) return undefined; len = (b[p] << 8) | b[p + 1]; p += 2; }
      if (p + len > end) return undefined;
      let ascii = true;
      for (let k = p; k < p + len; k++) if (b[k] >= 0x80) { ascii = false; break; }
      v = ascii ? b.latin1Slice(p, p + len) : wtf8Decode(b.subarray(p, p + len));
      p += len;
    } else {
      let w;
      switch (t) {
        case 0xc0: v = null; w = 0; break;
        case 0xc2: v = false; w = 0; break;
        case 0xc3: v = true; w = 0; break;
        case 0xcc: w = 1; break;
        case 0xcd: w = 2; break;
        case 0xce: w = 4; break;
        case 0xcf: w = 8; break;
        case 0xd0: w = 1; break;
        case 0xd1: w = 2; break;
        case 0xd2: w = 4; break;
        case 0xd3: w = 8; break;
        case 0xcb: w = 8; break;
        default: return undefined;    // float32, bin, ext, containers
      }
      if (p + w > end) return undefined;
      switch (t) {
        case 0xcc: v = b[p]; break;
        case 0xcd: v = b.readUInt16BE(p); break;
        case 0xce: v = b.readUInt32BE(p); break;
        case 0xcf: v = b.readUInt32BE(p) * 0x100000000 + b.readUInt32BE(p + 4); break;
        case 0xd0: v = b.readInt8(p); break;
        case 0xd1: v = b.readInt16BE(p); break;
        case 0xd2: v = b.readInt32BE(p); break;
        case 0xd3: v = b.readInt32BE(p) * 0x100000000 + b.readUInt32BE(p + 4); break;
        case 0xcb: v = b.readDoubleBE(p); break;
        default: break;
      }
      if (typeof v === 'number' && Number.isInteger(v) && !Number.isSafeInteger(v)) return undefined;
      p += w;
    }
    o[key] = v;
  }
  return p === end ? o : undefined;
}

// Turns rawStrings output into the protocol's values: str -> string (WTF-8),
// payload fields stay bytes, integers must be safe.
function convert(v, key) {
  if (v instanceof Uint8Array) return BYTE_FIELDS.has(key) ? v : wtf8Decode(v);
  if (typeof v === 'number') {
    if (Number.isInteger(v) && !Number.isSafeInteger(v))
      throw new CoordError('PROTOCOL', `${key}: integer beyond 2^53 from the broker`);
    return v;
  }
  if (Array.isArray(v)) return v.map((x) => convert(x, key));
  if (v && typeof v === 'object') {
    const o = {};
    for (const k of Object.keys(v)) o[k] = convert(v[k], k);
    return o;
  }
  return v;
}

// Size of the element header at body[p] and what follows it: [header bytes,
// payload bytes, items (containers: map entries count twice)], or null for
// 0xc1; a header cut off gives a header size past the end.
function elemHeader(b, p) {
  const x = b[p];
  if (x <= 0x7f || x >= 0xe0) return [1, 0, -1];
  if (x <= 0x8f) return [1, 0, (x & 15) * 2];
  if (x <= 0x9f) return [1, 0, x & 15];
  if (x <= 0xbf) return [1, x & 31, -1];
  const be = (n) => {                   // an n-byte big-endian count after the type byte
    if (p + 1 + n > b.length) return -1;
    let v = 0;
    for (let i = 1; i <= n; i++) v = v * 256 + b[p + i];
    return v;
  };
  switch (x) {
    case 0xc0: case 0xc2: case 0xc3: return [1, 0, -1];
    case 0xc1: return null;
    case 0xc4: case 0xd9: return [2, be(1), -1];
    case 0xc5: case 0xda: return [3, be(2), -1];
    case 0xc6: case 0xdb: return [5, be(4), -1];
    case 0xc7: return [3, be(1) + 1, -1];
    case 0xc8: return [4, be(2) + 1, -1];
    case 0xc9: return [6, be(4) + 1, -1];
    case 0xca: return [1, 4, -1];
    case 0xcb: return [1, 8, -1];
    case 0xcc: case 0xd0: return [1, 1, -1];
    case 0xcd: case 0xd1: return [1, 2, -1];
    case 0xce: case 0xd2: return [1, 4, -1];
    case 0xcf: case 0xd3: return [1, 8, -1];
    case 0xd4: return [1, 2, -1];
    case 0xd5: return [1, 3, -1];
    case 0xd6: return [1, 5, -1];
    case 0xd7: return [1, 9, -1];
    case 0xd8: return [1, 17, -1];
    case 0xdc: return [3, 0, be(2)];
    case 0xdd: return [5, 0, be(4)];
    case 0xde: { const n = be(2); return [3, 0, n < 0 ? -2 : n * 2]; }
    default: { const n = be(4); return [5, 0, n < 0 ? -2 : n * 2]; }   // 0xdf
  }
}

/** Why a frame body is not a frame the protocol allows (libcoord's
 * coord_frame_validate, with its texts), or null when it is: one map with
 * str keys at every level, nesting at most MAX_DEPTH, no trailing bytes.
 * A walk without recursion and without allocating per element. */
export function frameProblem(b) {
  const left = [];              // items left in each open container
  const inMap = [];
  let sp = 0;
  let p = 0;
  if (b.length === 0) return 'frame length is zero';
  do {
    let isKey = false;
    if (sp > 0) {
      if (left[sp - 1] === 0) { sp--; continue; }
      left[sp - 1]--;
      isKey = inMap[sp - 1] && (left[sp - 1] & 1) === 1;
    }
    if (p >= b.length) return 'truncated MessagePack';
    const x = b[p];
    const h = elemHeader(b, p);
    if (h === null) return 'invalid MessagePack byte';
    const [hdr, payload, items] = h;
    const isMap = (x >= 0x80 && x <= 0x8f) || x === 0xde || x === 0xdf;
    const isArray = (x >= 0x90 && x <= 0x9f) || x === 0xdc || x === 0xdd;
    const isStr = (x >= 0xa0 && x <= 0xbf) || x === 0xd9 || x === 0xda || x === 0xdb;
    if (p + hdr > b.length || payload < 0 || items === -2 || ((isMap || isArray) && items < 0))
      return 'truncated MessagePack';
    if (sp === 0 && !isMap) return 'frame body is not a map';
    if (isKey && !isStr) return 'map key is not a string';
    p += hdr;
    const rest = b.length - p;
    if (isMap || isArray) {
      if (sp >= MAX_DEPTH) return 'nesting too deep';
      if (items > rest) return 'truncated MessagePack';
      left[sp] = items;
      inMap[sp] = isMap;
      sp++;
    } else {
      if (payload > rest) return 'truncated MessagePack';
      p += payload;
    }
  } while (sp > 0);
  return p === b.length ? null : 'trailing bytes after the map';
}

/** Decodes one frame body into a plain object (throws CoordError PROTOCOL). */
export function decodeFrame(body) {
  if (Buffer.isBuffer(body)) {
    const o = decodeFlat(body);
    if (o !== undefined) return o;
  }
  const bytes = new Uint8Array(body.buffer, body.byteOffset, body.length);
  const why = frameProblem(bytes);
  if (why) throw new CoordError('PROTOCOL', `bad frame from the broker: ${why}`);
  let m;
  try {
    // a plain Uint8Array view: bins then come out as Uint8Array, not Buffer
    m = frameDecoder.decode(bytes);
  } catch (e) {
    throw new CoordError('PROTOCOL', `undecodable frame from the broker: ${e.message}`);
  }
  return convert(m, '');
}

/** Splits a byte stream into frame bodies.
 *
 * Linear in the bytes read: the chunks of a frame still arriving are kept in
 * a list and copied once, into the frame's own buffer, when its last byte is
 * in (a frame inside one chunk is not copied at all).  The length is checked
 * as soon as its 4 bytes are in, so at most maxFrame bytes (plus one chunk)
 * are ever held. */
export class FrameReader {
  constructor(maxFrame = DEFAULT_MAX_FRAME) {
    this.maxFrame = maxFrame;
    this.chunks = [];        // unread bytes: chunks[head] from offset `off`, then the rest whole
    this.head = 0;
    this.off = 0;
    this.have = 0;           // bytes held
    this.need = -1;          // body length of the frame being read, -1 before its header
  }

  /** Bytes held for a frame not yet complete. */
  get buffered() { return this.have; }

  /** Feeds a chunk; returns the complete frame bodies (throws on a bad length). */
  push(chunk) {
    if (chunk.length) {
      this.chunks.push(chunk);
      this.have += chunk.length;
    }
    const out = [];
    for (;;) {
      if (this.need < 0) {
        if (this.have < 4) break;
        const h = this.#take(4);
        const n = h.readUInt32BE(0);
        if (n === 0 || n > this.maxFrame)
          throw new CoordError('PROTOCOL', n === 0 ? 'bad frame from the broker: frame length is zero'
            : `bad frame from the broker: length ${n} is above max_frame (${this.maxFrame})`);
        this.need = n;
      }
      if (this.have < this.need) break;
      out.push(this.#take(this.need));
      this.need = -1;
    }
    if (this.head > 64 && this.head * 2 > this.chunks.length) {
      this.chunks = this.chunks.slice(this.head);
      this.head = 0;
    }
    return out;
  }

  // The next n bytes (n <= have): a view when they lie in one chunk, else one copy.
  #take(n) {
    const first = this.chunks[this.head];
    this.have -= n;
    if (first.length - this.off >= n) {
      const b = first.subarray(this.off, this.off + n);
      this.off += n;
      if (this.off === first.length) this.#next();
      return b;
    }
    const b = Buffer.allocUnsafe(n);
    let got = 0;
    while (got < n) {
      const c = this.chunks[this.head];
      const k = Math.min(c.length - this.off, n - got);
      b.set(c.subarray(this.off, this.off + k), got);
      got += k;
      this.off += k;
      if (this.off === c.length) this.#next();
    }
    return b;
  }

  #next() {
    this.chunks[this.head++] = undefined;
    this.off = 0;
    if (this.head === this.chunks.length) {
      this.chunks = [];
      this.head = 0;
    }
  }
}

// ---- user values ----

const valueEncoder = new Encoder({ ignoreUndefined: false });
const valueDecoder = new Decoder();

/** A user value as bytes: Uint8Array as is when raw, else MessagePack. */
export function packValue(value, raw, what = 'value') {
  if (raw) {
    if (!(value instanceof Uint8Array))
      throw new TypeError(`${what} must be a Uint8Array (raw: true)`);
    return value;
  }
  return valueEncoder.encode(value);
}

/** The inverse of packValue. */
export function unpackValue(bytes, raw) {
  if (raw) return bytes;
  return valueDecoder.decode(bytes);
}

export { valueEncoder, valueDecoder };
