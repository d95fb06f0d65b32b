// result-ref.js - results by reference (PROTOCOL.md, "Results by reference")
// as Node receives them.
//
// An owner may complete a flight with a descriptor (a sealed memfd) instead
// of the bytes; the broker never copies them through its buffers.  Node
// cannot receive descriptors over a Unix socket, so this client's hello says
// no `fds`, and such a result comes as `result_ref: {size, path, ino, ref}`:
// `path` (/proc/<broker pid>/fd/<n>) opens the same bytes while this
// connection holds `ref`.  openResultRef opens it read-only, checks that
// fstat's inode is `ino` (else the bytes are gone: a `GONE` CoordError),
// and releases the broker's hold at once with `flight.unref {ref}` (the open
// file keeps the bytes alive; the connection's close would release it too).
//
// What the caller gets: by default the client reads the bytes into a Buffer
// (`result`) and closes the file; with the `ref: true` option of
// flight.join and records.get it gets the ResultRef itself and reads it its
// way (`stream()`, `handle`, `buffer()`), so a 64 MiB result need never be
// one Buffer.
//
// Ownership: a ResultRef owns its FileHandle.  The caller closes it
// (`close()`, or Symbol.asyncDispose: `await using` where the runtime has it); `stream()` hands the file to the stream,
// which closes it when it ends or is destroyed.  A FileHandle that is
// garbage-collected open is closed by Node (with a warning).
import fs from 'node:fs/promises';
import { CoordError } from './errors.js';

// Bytes read per positional read of buffer(): a signal is checked between.
const CHUNK = 8 << 20;

const uint = (v) => (typeof v === 'bigint' ? v >= 0n : Number.isSafeInteger(v) && v >= 0);

/** The error of a reference whose bytes cannot be opened any more. */
function gone(msg, cause) {
  return new CoordError('GONE', `result by reference: ${msg}`, cause ? { cause } : undefined);
}

export class ResultRef {
  #handle;
  #owned = true;

  /** @internal made by openResultRef */
  constructor(handle, size) {
    this.#handle = handle;
    /** The result's length in bytes. */
    this.size = size;
  }

  /** The read-only fs.promises FileHandle (still this ResultRef's). */
  get handle() {
    if (!this.#owned) throw new Error('ResultRef: closed (or given to a stream)');
    return this.#handle;
  }

  get closed() { return !this.#owned; }

  /** The whole result as one Buffer, read from offset 0 (positional
   * reads); options.signal stops it between reads. */
  async buffer({ signal } = {}) {
    const h = this.handle;
    const out = Buffer.allocUnsafe(this.size);
    let off = 0;
    while (off < this.size) {
      signal?.throwIfAborted();
      const { bytesRead } = await h.read(out, off, Math.min(CHUNK, this.size - off), off);
      if (bytesRead === 0) throw gone(`the file ends at ${off} of ${this.size} bytes`);
      off += bytesRead;
    }
    return out;
  }

  /** A Readable (fs.ReadStream) of the result from offset 0; the file is
   * the stream's from now on (closed when it ends or is destroyed).
   * options: those of FileHandle.createReadStream (highWaterMark, ...;
   * start and end within the result). */
  stream(options = {}) {
    const h = this.handle;
    this.#owned = false;
    return h.createReadStream({ start: 0, ...options, autoClose: true });
  }

  /** Closes the file (again: nothing). */
  async close() {
    if (!this.#owned) return;
    this.#owned = false;
    await this.#handle.close();
  }

  async [Symbol.asyncDispose ?? Symbol.for("nodejs.asyncDispose")]() { await this.close(); }
}

/**
 * Opens a `result_ref` {size, path, ino, ref} that conn received and
 * releases it on conn (flight.unref); resolves a ResultRef the caller owns.
 * Rejects CoordError GONE when the path does not open or is another file,
 * PROTOCOL when the reference is malformed.
 */
export async function openResultRef(conn, r) {
  if (!r || typeof r !== 'object' || !uint(r.size) || typeof r.path !== 'string' || !uint(r.ino)
      || !uint(r.ref))
    throw new CoordError('PROTOCOL', 'the broker sent a malformed result_ref');
  const size = Number(r.size);
  let handle = null;
  try {
    try {
      handle = await fs.open(r.path, 'r');
    } catch (e) {
      throw gone(`cannot open ${r.path}: ${e.code || e.message}`, e);
    }
    const st = await handle.stat({ bigint: true });
    if (st.ino !== BigInt(r.ino))
      throw gone(`${r.path} is inode ${st.ino}, not ${r.ino}: the bytes are gone`);
    if (st.size < BigInt(size))
      throw gone(`${r.path} has ${st.size} bytes, not ${size}`);
    const ref = new ResultRef(handle, size);
    handle = null;
    return ref;
  } finally {
    if (handle) await handle.close().catch(() => {});
    conn.call('flight.unref', { ref: r.ref }).catch(() => {});
  }
}

/**
 * A reply's result as the caller asked for it: {result} (a Buffer; a
 * reference is read and closed) or, with wantRef, {resultRef} for a result
 * by reference (inline ones stay {result}).  body: the map holding
 * `result` or `result_ref`.
 */
export async function takeResult(conn, body, { ref: wantRef = false, signal } = {}) {
  if (!body || body.result_ref === undefined) return { result: body?.result };
  const rr = await openResultRef(conn, body.result_ref);
  if (wantRef) return { resultRef: rr };
  try {
    return { result: await rr.buffer({ signal }) };
  } finally {
    await rr.close();
  }
}
