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
