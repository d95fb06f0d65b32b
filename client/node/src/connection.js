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
//           then we wait for "ready\n" on its fd 3 and connect again.
// Node cannot read SO_PEERCRED, so instead of checking the peer's uid we
// refuse a socket whose directory is not ours or is writable by others (the
// broker itself refuses such a directory): only our uid can have bound there.
//
// Ownership: a Connection owns its socket; Client (client.js) owns the
// Connection and replaces it on reconnect.
import net from 'node:net';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { CoordError, ClosedError, ConnectError } from './errors.js';
import { FrameReader, decodeFrame, encodeFrame } from './wire.js';

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

function tryConnect(sockPath) {
  return new Promise((resolve) => {
    const s = net.createConnection({ path: sockPath });
    const onErr = (e) => { s.destroy(); resolve({ err: e }); };
    s.once('error', onErr);
    s.once('connect', () => { s.off('error', onErr); resolve({ socket: s }); });
  });
}

// Starts the broker detached; resolves 'ready', 'eof' (exited or another
// broker won the race) or 'timeout'; rejects when it could not be executed.
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
    pipe.on('data', (d) => {
      got += d.toString('latin1');
      if (got.includes('ready\n')) finish('ready');
    });
    pipe.once('close', () => finish('eof'));
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
        ? `the broker started for ${sockPath} did not answer within ${timeout} ms`
        : `the broker at ${sockPath} did not accept within ${timeout} ms (${err.code})`);
    }
    await sleep(Math.min(backoff, left));
    backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
  }
}

/**
 * One live connection.  `onEvent(msg)` gets every event frame; `onClose(err)`
 * is called once when the connection ends (err is a CoordError).
 */
export class Connection {
  constructor(socket, { onEvent, onClose }) {
    this.socket = socket;
    this.onEvent = onEvent;
    this.onClose = onClose;
    this.reader = new FrameReader();
    this.pending = new Map();        // rid -> {resolve, reject}
    this.nextRid = 1;
    this.closed = false;
    this.closeError = null;
    this.info = null;                // hello's reply
    socket.on('data', (chunk) => this._data(chunk));
    socket.on('error', (e) => {
      this.closeError ??= new ClosedError(`connection to the broker failed: ${e.message}`);
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
      if (m.rid === undefined) {
        if (typeof m.ev === 'string') this.onEvent(m);
        continue;
      }
      if (m.rid === 0) {
        // the broker's connection-level error (BAD_FRAME, LIMIT, ...), then close
        this.closeError ??= CoordError.from(m.code || 'PROTOCOL', m.message);
        continue;
      }
      const p = this.pending.get(m.rid);
      if (!p) continue;
      this.pending.delete(m.rid);
      if (m.ok === true) {
        // before any later frame of this chunk (an event it announces) is read
        try { p.onReply?.(m); } catch { /* the hook's own problem */ }
        p.resolve(m);
      }
      else {
        const err = CoordError.from(typeof m.code === 'string' ? m.code : 'PROTOCOL', m.message);
        if (typeof m.reason === 'string') err.reason = m.reason;   // e.g. 'purged'
        p.reject(err);
      }
    }
  }

  _closed() {
    if (this.closed) return;
    this.closed = true;
    const err = this.closeError || new ClosedError('the broker closed the connection');
    this.closeError = err;
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
   * read, before the frames after it (so that it can expect their events). */
  request(op, fields, onReply) {
    if (this.closed) return { rid: 0, promise: Promise.reject(this.closeError) };
    const rid = this.nextRid++;
    if (this.nextRid > 0xffffffff) this.nextRid = 1;
    const promise = new Promise((resolve, reject) => this.pending.set(rid, { resolve, reject, onReply }));
    this.socket.write(encodeFrame({ op, rid, ...fields }));
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
      timer = setTimeout(() => reject(new ConnectError(`the broker did not answer hello within ${timeout} ms`)), timeout);
    });
    try {
      const r = await Promise.race([
        this.call('hello', { proto: 1, client: name, pid: process.pid, instance: INSTANCE, scope: o.scope || '' }),
        t,
      ]);
      if (typeof r.max_frame === 'number' && r.max_frame > 0)
        this.reader.maxFrame = Math.max(this.reader.maxFrame, r.max_frame);
      this.info = r;
      return r;
    } finally {
      clearTimeout(timer);
    }
  }
}

/** Opens a connection and says hello. */
export async function openConnection(o, handlers) {
  const socket = await openSocket(o);
  const conn = new Connection(socket, handlers);
  try {
    await conn.hello(o);
  } catch (e) {
    conn.destroy(e);
    if (e instanceof ConnectError || !(e instanceof CoordError)) throw e;
    throw new ConnectError(`hello refused: ${e.code}: ${e.message}`);
  }
  return conn;
}
