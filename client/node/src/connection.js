// connection.js - one connection to coordd: finding the socket, starting the
// broker when nobody listens (autostart), the hello handshake, and matching
// replies to requests by rid.
//
// Socket resolution and autostart follow libcoord (client/connect.c):
//   socket: options.socket, else $COORD_SOCKET, else
//           $XDG_RUNTIME_DIR/coord/broker.sock, else /tmp/coord-$UID/broker.sock;
//   broker: options.broker, else $COORD_BROKER, else `coordd` from $PATH,
//           started detached (own session) as
//           `coordd --foreground --socket S --idle-exit N --ready-fd 3`,
//           then we wait for "ready\n" on its fd 3 and connect again (a broker
//           that cannot start writes "error REASON\n" there: we report it).
// Node cannot read SO_PEERCRED, so instead of checking the peer's uid we
// refuse a socket whose directory is not ours or is writable by others (the
// broker itself refuses such a directory): only our uid can have bound there.
//
// Wire order: frames are handled one at a time in the order they were read,
// replies and events alike, each to its end before the next (one dispatch
// path, _frame).  A reply that creates state an event can name (a lock, a
// leadership, an owned flight) creates it in its onReply hook, which runs
// synchronously there; its promise settles later (a microtask), so code
// after an `await` must never be where that state is made.  An event right
// behind its grant in the same read then finds it.
//
// Bounds: the broker's announced max_frame is refused above the protocol's
// cap (PROTOCOL_MAX_FRAME, 64 MiB); once EVENTS_PER_TURN events were read in
// one event-loop turn, the socket is paused until the next turn, when their
// deliveries (setImmediate tasks) have run: nothing is dropped, and no more
// than EVENTS_PER_TURN plus one socket read's worth wait for delivery (the
// broker meanwhile sees a slow reader); every request but the ones that
// wait by design (WAITING_OPS) fails with TIMEOUT when the broker has not
// answered within requestTimeoutMs.
//
// Reads go through net's onread (one buffer shared by every socket, each
// read copied out at once: tryConnect, attachReader), not the Readable
// stream's 'data' events; writes are whole frames (wire.js encodeRequest).
//
// Ownership: a Connection owns its socket; Client (client.js) owns the
// Connection and replaces it on reconnect.
import net from 'node:net';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { CoordError, ClosedError, ConnectError, TimeoutError } from './errors.js';
import { FrameReader, decodeFrame, encodeRequest, PROTOCOL_MAX_FRAME } from './wire.js';
import { seconds } from './util.js';

// Same defaults as libcoord (connect.c).
export const DEFAULT_CONNECT_TIMEOUT_MS = 2000;
// The broker closes a connection without hello after 5 s; waiting at least as
// long for hello's reply tolerates a loaded broker.
const MIN_HELLO_TIMEOUT_MS = 5000;
const DEFAULT_IDLE_EXIT_S = 60;
const MAX_BACKOFF_MS = 50;
// Brokers one connect may start: one that exits at once (the lock beside the
// socket still held by a broker that is dying) is started again.
const MAX_SPAWNS = 8;
// sun_path is 108 bytes with its NUL.
const SOCKET_PATH_MAX = 107;
// A request's default deadline (requestTimeoutMs): long enough for a broker
// under load (an fsync, a large purge), short enough that a frozen or
// hostile broker cannot hang a call forever.
export const DEFAULT_REQUEST_TIMEOUT_MS = 30000;
// Requests that wait by design (a lock, a flight's result, a leadership):
// their own timeouts (timeout_ms, wait_ms) and signals bound them.
const WAITING_OPS = new Set(['lock.acquire', 'flight.join', 'leader.campaign']);
// What a TIMEOUT of each means, said with the wait's length (as libcoord).
const WAIT_WHAT = { 'lock.acquire': 'lock not granted', 'flight.join': 'no result',
  'leader.campaign': 'not elected' };
// Events read per event-loop turn before the socket is paused for the rest
// of the turn: bounds what waits for delivery (BroadcastChannel messages are
// delivered in setImmediate tasks) whatever the broker sends.
export const EVENTS_PER_TURN = 1000;
// After a write to a connection the broker had already closed (EPIPE), how
// long a second connection waits for the broker's first frame (a refusal:
// LIMIT, SHUTTING_DOWN) before it says hello.
const REFUSAL_WAIT_MS = 200;

/** New per process start, as libcoord's instance id. */
export const INSTANCE = randomBytes(16).toString('hex');

const envNonEmpty = (k) => (process.env[k] ? process.env[k] : null);

/** The socket path libcoord would use. */
export function defaultSocketPath() {
  const s = envNonEmpty('COORD_SOCKET');
  if (s) return s;
  const x = envNonEmpty('XDG_RUNTIME_DIR');
  if (x) return `${x}/coord/broker.sock`;
  return `/tmp/coord-${process.getuid()}/broker.sock`;
}

function checkDir(dir) {
  let st;
  try {
    st = fs.lstatSync(dir);
  } catch (e) {
    if (e.code === 'ENOENT') return false;
    throw new ConnectError(`cannot inspect ${dir}: ${e.message}`);
  }
  if (!st.isDirectory()) throw new ConnectError(`${dir} is not a directory`);
  if (st.uid !== process.getuid())
    throw new ConnectError(`${dir} is owned by uid ${st.uid}, not by uid ${process.getuid()}: refusing it`);
  if (st.mode & 0o022)
    throw new ConnectError(`${dir} is writable by group or others (mode ${(st.mode & 0o777).toString(8)})`);
  return true;
}

function prepareDir(dir) {
  if (checkDir(dir)) return;
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (e) {
    throw new ConnectError(`cannot create ${dir}: ${e.message}`);
  }
  checkDir(dir);
}

function resolveBroker(name) {
  if (name.includes('/')) return name;
  const dirs = (process.env.PATH || '/usr/local/bin:/usr/bin:/bin').split(':');
  for (const d of dirs) {
    const p = d ? `${d}/${name}` : `./${name}`;
    try {
      fs.accessSync(p, fs.constants.X_OK);
      if (fs.statSync(p).isFile()) return p;
    } catch { /* next */ }
  }
  return null;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Reads: a socket reads into one buffer shared by all (net's onread), and
// each read is copied out at once into a chunk of its own size, handed to
// the socket's reader (Connection#_data).  Node's default read path (a 64
// KiB buffer per read, the Readable stream's queue and 'data' events) costs
// ~3 us per read on a 2-vCPU VM, a tenth of a lock cycle.  Chunks read
// before a reader is attached wait in `early`.
const READ_BUFFER_BYTES = 64 * 1024;
let readBuffer = null;
const READS = Symbol('coord.reads');

function onReadOptions(box) {
  return {
    buffer: () => (readBuffer ??= Buffer.allocUnsafe(READ_BUFFER_BYTES)),
    callback: (n, buf) => {
      const chunk = Buffer.allocUnsafe(n);
      buf.copy(chunk, 0, 0, n);
      if (box.reader) box.reader(chunk);
      else box.early.push(chunk);
    },
  };
}

/** Hands the socket's reads to reader(chunk), those already read first. */
function attachReader(socket, reader) {
  const box = socket[READS];
  if (!box) {                        // a socket not from tryConnect
    socket.on('data', reader);
    return;
  }
  box.reader = reader;
  for (const chunk of box.early.splice(0)) reader(chunk);
}

function tryConnect(sockPath) {
  return new Promise((resolve) => {
    const box = { reader: null, early: [] };
    const s = net.createConnection({ path: sockPath, onread: onReadOptions(box) });
    s[READS] = box;
    const onErr = (e) => { s.destroy(); resolve({ err: e }); };
    s.once('error', onErr);
    s.once('connect', () => { s.off('error', onErr); resolve({ socket: s }); });
  });
}

// The longest line a starting broker writes to its ready fd (paths.h).
const READY_LINE_MAX = 1024;

// Starts the broker detached; resolves 'ready', 'eof' (exited or another
// broker won the race) or 'timeout'; rejects when it could not be executed
// or when it could not start: then it wrote "error REASON\n" on the ready fd
// (a data dir served by another broker, one that cannot be created, ...).
function spawnBroker(broker, sockPath, idleS, deadline) {
  return new Promise((resolve, reject) => {
    let child;
    try {
      child = spawn(broker, ['--foreground', '--socket', sockPath, '--idle-exit', String(idleS),
        '--ready-fd', '3'], { detached: true, stdio: ['ignore', 'ignore', 'ignore', 'pipe'] });
    } catch (e) {
      reject(new ConnectError(`cannot start the broker ${broker}: ${e.message}`));
      return;
    }
    const pipe = child.stdio[3];
    let got = '';
    let done = false;
    const finish = (how, err) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      pipe.destroy();
      child.unref();
      if (err) reject(err); else resolve(how);
    };
    const timer = setTimeout(() => finish('timeout'), Math.max(0, deadline - Date.now()));
    child.once('error', (e) => finish(null, new ConnectError(`cannot start the broker ${broker}: ${e.message}`)));
    // "error REASON": whole once its newline came, the pipe closed or the
    // line reached its limit
    const failed = (whole) => {
      const nl = got.indexOf('\n');
      if (!got.startsWith('error ') || !(whole || nl > 6 || got.length >= READY_LINE_MAX))
        return false;
      const reason = got.slice(6, nl > 0 ? nl : READY_LINE_MAX);
      finish(null, new ConnectError(`the broker for ${sockPath} did not start: ${reason}`));
      return true;
    };
    pipe.on('data', (d) => {
      got += d.toString('utf8');
      if (got.includes('ready\n')) finish('ready');
      else failed(false);
    });
    pipe.once('close', () => failed(true) || finish('eof'));
    pipe.once('error', () => finish('eof'));
  });
}

/** Connects the socket, autostarting the broker when allowed. */
export async function openSocket(o) {
  const sockPath = o.socket || defaultSocketPath();
  if (Buffer.byteLength(sockPath) > SOCKET_PATH_MAX)
    throw new ConnectError(`socket path must be at most ${SOCKET_PATH_MAX} bytes: ${sockPath}`);
  const timeout = o.connectTimeout || DEFAULT_CONNECT_TIMEOUT_MS;
  const deadline = Date.now() + timeout;
  const dir = path.dirname(sockPath);
  let spawned = false;
  let spawns = 0;
  let backoff = 1;
  for (;;) {
    o.signal?.throwIfAborted();
    checkDir(dir);
    const { socket, err } = await tryConnect(sockPath);
    if (socket) return socket;
    if (err.code === 'ENOENT' || err.code === 'ECONNREFUSED') {
      if (o.autostart === false)
        throw new ConnectError(`no broker at ${sockPath}: ${err.code}`);
      if (!spawned && spawns < MAX_SPAWNS) {
        spawned = true;
        spawns++;
        prepareDir(dir);
        const name = o.broker || envNonEmpty('COORD_BROKER') || 'coordd';
        const broker = resolveBroker(name);
        if (!broker)
          throw new ConnectError(`cannot start the broker: ${name} not found${name.includes('/') ? '' : ' in PATH'}`);
        const r = await spawnBroker(broker, sockPath, o.idleExit || DEFAULT_IDLE_EXIT_S, deadline);
        if (r === 'ready') continue;          // connect again at once
        // eof: another broker won the race, or the lock beside the socket was
        // still held by one that is dying: retry, starting one again if
        // nobody listens
        if (r === 'eof') spawned = false;
      }
    } else if (err.code !== 'EAGAIN' && err.code !== 'EINTR') {
      throw new ConnectError(`cannot connect to ${sockPath}: ${err.message}`);
    }
    const left = deadline - Date.now();
    if (left <= 0) {
      throw new ConnectError(spawned
        ? `the broker started for ${sockPath} did not answer: timed out after ${seconds(timeout)}`
        : `the broker at ${sockPath} did not accept: timed out after ${seconds(timeout)} (${err.code})`);
    }
    await sleep(Math.min(backoff, left));
    backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
  }
}

/**
 * One live connection.  `onEvent(msg)` gets every event frame; `onClose(err)`
 * is called once when the connection ends (err is a CoordError).
 * opts.requestTimeoutMs: see DEFAULT_REQUEST_TIMEOUT_MS (0: no deadline).
 */
export class Connection {
  constructor(socket, { onEvent, onClose }, { requestTimeoutMs = DEFAULT_REQUEST_TIMEOUT_MS } = {}) {
    this.socket = socket;
    this.onEvent = onEvent;
    this.onClose = onClose;
    this.reader = new FrameReader();
    this.pending = new Map();        // rid -> {op, resolve, reject, onReply}
    this.timed = new Map();          // rid -> deadline (ms), in send order: the ones with a deadline
    this.timer = null;
    this.requestTimeoutMs = requestTimeoutMs;
    this.nextRid = 1;
    this.closed = false;
    this.closeError = null;
    this.info = null;                // hello's reply
    this.eventsThisTurn = 0;         // events read since this turn's deliveries
    this.paused = false;
    this.frames = 0;                 // frames read (0: the broker said nothing yet)
    this.onFirstFrame = null;
    this.writeFailed = false;
    attachReader(socket, (chunk) => this._data(chunk));
    socket.on('error', (e) => {
      this.closeError ??= new ClosedError(`connection to the broker failed: ${e.message}`);
      this.writeFailed ||= e.syscall === 'write' || e.code === 'EPIPE';
    });
    socket.on('close', () => this._closed());
  }

  _data(chunk) {
    let bodies;
    try {
      bodies = this.reader.push(chunk);
    } catch (e) {
      this.destroy(e);
      return;
    }
    for (const body of bodies) {
      if (this.closed) return;
      let m;
      try {
        m = decodeFrame(body);
      } catch (e) {
        this.destroy(e);
        return;
      }
      if (this.frames++ === 0) this.onFirstFrame?.();
      this._frame(m);
    }
    if (this.eventsThisTurn >= EVENTS_PER_TURN && !this.paused && !this.closed) {
      this.paused = true;
      this.socket.pause();
    }
  }

  // One frame, to its end, before the next one is looked at.
  _frame(m) {
    if (m.rid === undefined) {
      if (typeof m.ev === 'string') {
        // the turn's first event: after this turn's deliveries, count again
        // (and read again, if paused)
        if (this.eventsThisTurn++ === 0) setImmediate(() => this._nextTurn());
        this.onEvent(m);
      }
      return;
    }
    if (m.rid === 0) {
      // the broker's connection-level error (BAD_FRAME, LIMIT, ...), then close
      this.closeError ??= CoordError.from(typeof m.code === 'string' ? m.code : 'PROTOCOL', m.message);
      return;
    }
    const p = this.pending.get(m.rid);
    if (!p) return;                  // timed out meanwhile, or not ours
    this.pending.delete(m.rid);
    this.timed.delete(m.rid);
    if (m.ok === true) {
      // before the next frame is read (an event about what this reply made)
      try { p.onReply?.(m); } catch { /* the hook's own problem */ }
      p.resolve(m);
    } else {
      const code = typeof m.code === 'string' ? m.code : 'PROTOCOL';
      // "lock not granted: timed out after 0.5 s", not the broker's words
      // (which name its request fields: timeout_ms, wait_ms)
      const message = code === 'TIMEOUT' && p.wait > 0 && WAIT_WHAT[p.op]
        ? `${WAIT_WHAT[p.op]}: timed out after ${seconds(p.wait)}` : m.message;
      const err = CoordError.from(code, message);
      if (typeof m.reason === 'string') err.reason = m.reason;   // e.g. 'purged'
      p.reject(err);
    }
  }

  _nextTurn() {
    this.eventsThisTurn = 0;
    if (!this.paused) return;
    this.paused = false;
    if (!this.closed) this.socket.resume();
  }

  // Fails the requests whose deadline has passed, oldest first; arms the
  // timer for the next one.
  _expire() {
    this.timer = null;
    const now = Date.now();
    for (const [rid, at] of this.timed) {
      if (at > now) break;
      this.timed.delete(rid);
      const p = this.pending.get(rid);
      if (!p) continue;
      this.pending.delete(rid);
      p.reject(new TimeoutError(`${p.op}: the broker did not answer: timed out after ${seconds(this.requestTimeoutMs)} (requestTimeoutMs)`));
    }
    this._arm();
  }

  _arm() {
    if (this.timer || this.closed) return;
    const first = this.timed.values().next();
    if (first.done) return;
    this.timer = setTimeout(() => this._expire(), Math.max(0, first.value - Date.now()));
    this.timer.unref();
  }

  _closed() {
    if (this.closed) return;
    this.closed = true;
    const err = this.closeError || new ClosedError('the broker closed the connection');
    this.closeError = err;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timed.clear();
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    this.onClose(err);
  }

  /** Ends the connection; pending requests reject with err (or CLOSED). */
  destroy(err) {
    this.closeError ??= err || new ClosedError('the connection was closed');
    this.socket.destroy();
    // 'close' comes from the socket asynchronously; settle now so that
    // nothing waits on a connection we gave up
    this._closed();
  }

  /** Sends a request; returns {rid, promise} (promise: the ok reply).
   * onReply(reply), if given, is called synchronously when the ok reply is
   * read, before the frames after it (so that it can expect their events).
   * A request that does not wait by design rejects with TimeoutError when
   * no reply came within requestTimeoutMs (its late reply is then ignored). */
  request(op, fields, onReply) {
    if (this.closed) return { rid: 0, promise: Promise.reject(this.closeError) };
    const rid = this.nextRid++;
    if (this.nextRid > 0xffffffff) this.nextRid = 1;
    // a wait's own limit, to say a TIMEOUT in the caller's terms
    const wait = WAITING_OPS.has(op) ? (fields.timeout_ms ?? fields.wait_ms) : undefined;
    const promise = new Promise((resolve, reject) => this.pending.set(rid, { op, wait, resolve, reject, onReply }));
    if (this.requestTimeoutMs > 0 && !WAITING_OPS.has(op) && op !== 'hello') {
      this.timed.set(rid, Date.now() + this.requestTimeoutMs);
      this._arm();
    }
    this.socket.write(encodeRequest(op, rid, fields));
    return { rid, promise };
  }

  call(op, fields = {}) {
    return this.request(op, fields).promise;
  }

  /** Cancels a waiting request (its own reply is ABORTED); fire and forget. */
  cancel(rid) {
    if (this.closed || !this.pending.has(rid)) return;
    this.call('cancel', { target: rid }).catch(() => {});
  }

  get pendingCount() { return this.pending.size; }

  /** hello; resolves hello's reply. */
  async hello(o) {
    const name = o.client || path.basename(process.argv[1] || process.argv0 || 'node');
    const timeout = Math.max(o.connectTimeout || DEFAULT_CONNECT_TIMEOUT_MS, MIN_HELLO_TIMEOUT_MS);
    let timer;
    const t = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new ConnectError(`the broker did not answer hello: timed out after ${seconds(timeout)}`)), timeout);
    });
    try {
      // A broker that refuses us (full, shutting down) writes its refusal
      // and closes at once; one poll of the socket first reads it before
      // our write can fail with EPIPE (which would lose it: a socket whose
      // write failed is destroyed unread).
      await new Promise((r) => setImmediate(() => setImmediate(r)));
      if (o.readFirst && !this.closed && this.frames === 0)
        await this.firstFrame(Math.min(REFUSAL_WAIT_MS, timeout));
      const r = await Promise.race([
        this.call('hello', { proto: 1, client: name, pid: process.pid, instance: INSTANCE, scope: o.scope || '' }),
        t,
      ]);
      const mf = r.max_frame;
      if (mf !== undefined && (!Number.isSafeInteger(mf) || mf < 1 || mf > PROTOCOL_MAX_FRAME))
        throw new CoordError('PROTOCOL', `the broker announced max_frame ${mf}, above the protocol's cap of ${PROTOCOL_MAX_FRAME} bytes (64 MiB): refusing to buffer frames that large`);
      if (typeof mf === 'number')
        this.reader.maxFrame = Math.max(this.reader.maxFrame, mf);
      this.info = r;
      return r;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Resolves once the broker has sent a frame, closed, or ms passed. */
  firstFrame(ms) {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.onFirstFrame = null;
        this.socket.off('close', done);
        resolve();
      };
      const t = setTimeout(done, ms);
      this.onFirstFrame = done;
      this.socket.once('close', done);
    });
  }
}

/** Opens a connection and says hello. */
export async function openConnection(o, handlers) {
  const requestTimeoutMs = requestTimeout(o);
  for (let attempt = 0; ; attempt++) {
    const socket = await openSocket(o);
    const conn = new Connection(socket, handlers, { requestTimeoutMs });
    try {
      await conn.hello(attempt ? { ...o, readFirst: true } : o);
    } catch (e) {
      conn.destroy(e);
      // our write met a connection the broker had closed, before it said
      // anything we read: its refusal (if any) was lost with the socket.
      // Once more, reading first, to report what the broker says.
      if (attempt === 0 && conn.writeFailed && conn.frames === 0) continue;
      if (e instanceof ConnectError || !(e instanceof CoordError)) throw e;
      throw new ConnectError(`hello refused: ${e.code}: ${e.message}`);
    }
    return conn;
  }
}

function requestTimeout(o) {
  const v = o.requestTimeoutMs;
  if (v === undefined || v === null) return DEFAULT_REQUEST_TIMEOUT_MS;
  if (!Number.isFinite(v) || v < 0) throw new TypeError('connect: requestTimeoutMs must be a non-negative number of milliseconds (0: no deadline)');
  return Math.floor(v);
}
