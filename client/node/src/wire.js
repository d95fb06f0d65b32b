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

/** Decodes one frame body into a plain object (throws CoordError PROTOCOL). */
export function decodeFrame(body) {
  let m;
  try {
    // a plain Uint8Array view: bins then come out as Uint8Array, not Buffer
    m = frameDecoder.decode(new Uint8Array(body.buffer, body.byteOffset, body.length));
  } catch (e) {
    throw new CoordError('PROTOCOL', `undecodable frame from the broker: ${e.message}`);
  }
  if (!m || typeof m !== 'object' || Array.isArray(m) || m instanceof Uint8Array)
    throw new CoordError('PROTOCOL', 'frame from the broker is not a map');
  return convert(m, '');
}

/** Splits a byte stream into frame bodies. */
export class FrameReader {
  constructor(maxFrame = DEFAULT_MAX_FRAME) {
    this.maxFrame = maxFrame;
    this.buf = null;
  }

  /** Feeds a chunk; returns the complete frame bodies (throws on a bad length). */
  push(chunk) {
    let buf = this.buf ? Buffer.concat([this.buf, chunk]) : chunk;
    const out = [];
    let off = 0;
    while (buf.length - off >= 4) {
      const n = buf.readUInt32BE(off);
      if (n === 0 || n > this.maxFrame)
        throw new CoordError('PROTOCOL', `bad frame length ${n} from the broker`);
      if (buf.length - off - 4 < n) break;
      out.push(buf.subarray(off + 4, off + 4 + n));
      off += 4 + n;
    }
    this.buf = off === buf.length ? null : buf.subarray(off);
    return out;
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
