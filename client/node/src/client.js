// client.js - connect() and the Client: one broker connection shared by every
// feature (locks, BroadcastChannel, once/flight, leader, records, watch).
//
// Lifetime: connect() resolves once hello is answered.  When the connection
// is lost, every waiting call rejects (ClosedError, code CLOSED) and every
// thing held through it is declared lost: held locks and leaderships abort
// their signals and reject their promises, flight owners' signals abort,
// watch iterators end with the error.  With `reconnect: true` the client
// then connects again (autostart included), says hello, subscribes its
// BroadcastChannels again, and calls made meanwhile wait for it; without it
// the client is closed.  close() is final.
//
// The socket keeps the process alive only while something is in progress
// (a call waiting, a lock or leadership held, a channel open, a watch):
// a script that forgets close() still exits when it is done.
//
// Events: 'disconnect' and 'reconnect' (CustomEvent, detail {error} /
// {conn, epoch}) on the client, an EventTarget; 'flight.updated' (detail
// {key, status, fence}) when a revalidation this client was served stale
// for ended (flight.js).
import { openConnection } from './connection.js';
import { ClosedError, CoordError } from './errors.js';
import { LockManager } from './locks.js';
import { makeBroadcastChannel } from './channel.js';
import { Flight, once } from './flight.js';
import { Records } from './records.js';
import { Leaders, leader } from './leader.js';
import { watch } from './watch.js';
import { camel, untilAborted } from './util.js';
import { wireName } from './wire.js';
import { requestKey } from './request-key.js';

// Reconnect backoff: first retry soon (a broker restart takes milliseconds),
// then at most once a second so that a broker that is gone costs little.
const RECONNECT_FIRST_MS = 20;
const RECONNECT_MAX_MS = 1000;

export class Client extends EventTarget {
  #opts;
  #conn = null;
  #state = 'open';          // open | reconnecting | closed
  #ready = null;            // promise while reconnecting
  #wake = null;             // settles #ready (close() while reconnecting)
  #closeError = null;
  #active = 0;              // things that keep the process alive
  #holders = new Set();     // objects with lose(err): lost with the connection
  #subs = new Map();        // channel -> number of local users
  #channels = new Map();    // channel -> Set of BroadcastChannel objects
  #watchers = new Set();

  /** @internal use connect() */
  constructor(opts, conn) {
    super();
    this.#opts = opts;
    this.locks = new LockManager(this);
    this.BroadcastChannel = makeBroadcastChannel(this);
    this.flight = new Flight(this);
    this.records = new Records(this);
    this.leaders = new Leaders(this);
    this.#adopt(conn);
  }

  // ---- connection ----

  static async _open(opts, client) {
    const box = {};
    const conn = await openConnection(opts, {
      onEvent: (m) => box.client?._event(box.conn, m),
      onClose: (e) => box.client?._dropped(box.conn, e),
    });
    box.conn = conn;
    box.client = client;
    return { conn, box };
  }

  #adopt(conn) {
    this.#conn = conn;
    this.#applyRef();
  }

  /** The broker's hello reply of the current connection. */
  get info() {
    const i = this.#conn?.info;
    return i ? { broker: i.broker, conn: i.conn, epoch: i.epoch, maxFrame: i.max_frame, proto: i.proto,
      maxRefBytes: i.max_ref_bytes } : null;
  }

  /** This client's clientId, as query() shows it. */
  get clientId() { return this._clientIdOf(this.#conn?.info?.conn); }

  get closed() { return this.#state === 'closed'; }

  _clientIdOf(conn) {
    return `${this.#conn?.info?.epoch ?? 0}:${conn}`;
  }

  _dropped(conn, err) {
    if (conn !== this.#conn || this.#state !== 'open') return;
    this.#loseAll(err);
    this.dispatchEvent(new CustomEvent('disconnect', { detail: { error: err } }));
    if (this.#opts.reconnect && !this.#opts.signal?.aborted) {
      this.#state = 'reconnecting';
      // settles when the loop ends or close() is called, whichever is first:
      // a call waiting for the broker to come back never outlives close()
      this.#ready = Promise.race([this.#reconnectLoop(), new Promise((r) => { this.#wake = r; })]);
    } else {
      this.#state = 'closed';
      this.#closeError = err;
      this.#letGoOfSignal();
    }
  }

  #loseAll(err) {
    const hs = [...this.#holders];
    this.#holders.clear();
    for (const h of hs) {
      try { h.lose(err); } catch { /* a holder's own problem */ }
    }
    for (const w of [...this.#watchers]) w._fail(err);
  }

  // The outcome of the reconnect loop's next attempt: resolves when it
  // connected, rejects with its error (ConnectError: connect or autostart
  // failed) when it did not.  For calls that must not wait for the broker
  // to come back (once() with its fallback policy).
  #attempt = null;

  #nextAttempt() {
    let resolve, reject;
    const promise = new Promise((a, b) => { resolve = a; reject = b; });
    promise.catch(() => {});
    this.#attempt = { promise, resolve, reject };
  }

  async #reconnectLoop() {
    let delay = RECONNECT_FIRST_MS;
    this.#nextAttempt();
    while (this.#state === 'reconnecting') {
      try {
        const { conn, box } = await Client._open(this.#opts, null);
        if (this.#state !== 'reconnecting') { conn.destroy(); return; }
        box.client = this;
        this.#adopt(conn);
        this.#state = 'open';
        this.#attempt.resolve();
        for (const ch of this.#subs.keys())
          conn.call('sub.subscribe', { channel: wireName(ch) }).catch(() => {});
        this.dispatchEvent(new CustomEvent('reconnect', { detail: { conn: conn.info.conn, epoch: conn.info.epoch } }));
        return;
      } catch (e) {
        const a = this.#attempt;
        this.#nextAttempt();
        a.reject(e);
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, RECONNECT_MAX_MS);
      }
    }
  }

  /** The current connection; while reconnecting, waits for the reconnect
   * (or, with attempt, for the next attempt only: rejects with its error);
   * signal (a request's own) rejects that wait with its reason. */
  async #current(attempt = false, signal) {
    while (this.#state === 'reconnecting') {
      const next = attempt ? this.#attempt.promise : this.#ready;
      await (signal ? untilAborted(next, signal) : next);
    }
    if (this.#state === 'closed') throw this.#closeError;
    return this.#conn;
  }

  /** True once close() was called (not when the connection was lost). */
  get _closedByUser() { return this.#closedByUser; }
  /** The scope this client said hello in ('' by default). */
  get scope() { return this.#opts.scope || ''; }

  #closedByUser = false;

  #unwatchSignal = null;

  /** connect()'s signal: aborting it closes the client; a closed client
   * stops listening (a signal may outlive many clients). */
  _closeOn(signal) {
    const onAbort = () => this.close();
    signal.addEventListener('abort', onAbort, { once: true });
    this.#unwatchSignal = () => signal.removeEventListener('abort', onAbort);
  }

  /** A closed client stops listening to connect()'s signal. */
  #letGoOfSignal() {
    this.#unwatchSignal?.();
    this.#unwatchSignal = null;
  }

  /** Closes the client: pending calls reject with ClosedError, held things are lost. */
  close() {
    this.#closedByUser = true;
    this.#letGoOfSignal();
    if (this.#state === 'closed') return Promise.resolve();
    const err = new ClosedError('the client was closed');
    const reconnecting = this.#state === 'reconnecting';
    this.#state = 'closed';
    if (reconnecting) {
      this.#attempt?.reject(err);
      this.#wake?.();
    }
    this.#closeError = err;
    const conn = this.#conn;
    this.#loseAll(err);
    for (const set of this.#channels.values())
      for (const ch of [...set]) ch._detach();
    if (!conn || conn.closed) return Promise.resolve();
    return new Promise((resolve) => {
      conn.socket.once('close', () => resolve());
      conn.destroy(err);
    });
  }

  [Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose')]() { return this.close(); }

  // ---- keeping the process alive ----

  /** Marks something in progress; returns the function that ends it. */
  _hold() {
    this.#active++;
    if (this.#active === 1) this.#applyRef();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.#active--;
      if (this.#active === 0) this.#applyRef();
    };
  }

  #applyRef() {
    const s = this.#conn?.socket;
    if (!s) return;
    if (this.#active > 0) s.ref(); else s.unref();
  }

  /** Registers h (with h.lose(err)) to be told when the connection is lost. */
  _remember(h) {
    this.#holders.add(h);
    if (!h._release) h._release = this._hold();
  }

  _forget(h) {
    this.#holders.delete(h);
    h._release?.();
  }

  // ---- requests ----

  /** Sends a request that may wait; resolves {conn, rid, promise}.
   * onReply: see Connection.request; attempt, signal: see #current (the
   * caller still cancels a request sent once signal aborts). */
  async _request(op, fields, { onReply, attempt = false, signal } = {}) {
    const conn = await this.#current(attempt, signal);
    const { rid, promise } = conn.request(op, fields, onReply);
    return { conn, rid, promise };
  }

  /** One call: resolves {r: the ok reply, conn: the connection it came
   * on} (what a result by reference is released on), rejects CoordError. */
  async _callConn(op, fields = {}) {
    const release = this._hold();
    try {
      const conn = await this.#current();
      return { r: await conn.call(op, fields), conn };
    } finally {
      release();
    }
  }

  /** _request without waiting: {conn, rid, promise} when the connection is
   * open (a lock cycle's hot path: no await before the write), else null. */
  _requestNow(op, fields, onReply) {
    if (this.#state !== 'open') return null;
    const conn = this.#conn;
    const { rid, promise } = conn.request(op, fields, onReply);
    return { conn, rid, promise };
  }

  /** One call: resolves the ok reply, rejects CoordError. */
  async _call(op, fields = {}) {
    const release = this._hold();
    try {
      const conn = await this.#current();
      return await conn.call(op, fields);
    } finally {
      release();
    }
  }

  /** An id from the broker: a positive safe integer, else PROTOCOL. */
  _id(v, what) {
    if (!Number.isSafeInteger(v) || v < 0)
      throw new CoordError('PROTOCOL', `${what}: expected an unsigned integer below 2^53, got ${v}`);
    return v;
  }

  // ---- events ----

  _event(conn, m) {
    if (conn !== this.#conn) return;
    switch (m.ev) {
      case 'lock.lost': this.locks._lost(m); break;
      case 'flight.abort': this.flight._abort(m); break;
      case 'flight.updated': this.flight._updated(m); break;
      case 'leader.lost': this.leaders._lost(m); break;
      case 'leader.drain': this.leaders._drain(m); break;
      case 'leader.mode': this.leaders._mode(m); break;
      case 'message': {
        const set = this.#channels.get(m.channel);
        if (set) for (const ch of set) ch._deliver(m.data);
        break;
      }
      case 'lifecycle':
        for (const w of this.#watchers) w._push(m);
        break;
      default: break;
    }
  }

  // ---- channels (BroadcastChannel and watch) ----

  _subscribe(channel) {
    const n = this.#subs.get(channel) || 0;
    this.#subs.set(channel, n + 1);
    if (n > 0) return this.#subReady.get(channel) ?? Promise.resolve();
    // a failed subscribe keeps the count: the object still exists and a
    // reconnect subscribes again
    const p = this._call('sub.subscribe', { channel: wireName(channel) }).then(() => {});
    this.#subReady.set(channel, p);
    p.catch(() => {});
    return p;
  }

  #subReady = new Map();

  _unsubscribe(channel) {
    const n = this.#subs.get(channel) || 0;
    if (n <= 1) {
      this.#subs.delete(channel);
      this.#subReady.delete(channel);
      if (this.#state === 'open') this._call('sub.unsubscribe', { channel: wireName(channel) }).catch(() => {});
    } else {
      this.#subs.set(channel, n - 1);
    }
  }

  _addChannel(key, ch) {
    let set = this.#channels.get(key);
    if (!set) this.#channels.set(key, (set = new Set()));
    set.add(ch);
  }

  _removeChannel(key, ch) {
    const set = this.#channels.get(key);
    if (!set) return;
    set.delete(ch);
    if (set.size === 0) this.#channels.delete(key);
  }

  /** The other local objects of a channel, for delivery to the same process. */
  _localPeers(key) {
    return this.#channels.get(key) || new Set();
  }

  _addWatcher(w) { this.#watchers.add(w); }
  _removeWatcher(w) { this.#watchers.delete(w); }

  get _maxFrame() { return this.#conn?.info?.max_frame || 1024 * 1024; }

  // ---- features ----

  /** Single-flight: see flight.js. */
  once(key, fn, options) { return once(this, key, fn, options); }

  /** The canonical request key of an HTTP request: see request-key.js (needs no broker). */
  requestKey(request) { return requestKey(request); }

  /** Leadership: see leader.js. */
  leader(workstream, options, fn) { return leader(this, workstream, options, fn); }

  /** Lifecycle events of the broker's channels ('-locks', '-flights', '-leaders'). */
  watch(channels, options) { return watch(this, channels, options); }

  /** The broker's counters (camelCase keys). */
  async stats() {
    const r = await this._call('stats', {});
    delete r.rid; delete r.ok;
    return camel(r);
  }

  /** A round trip to the broker. */
  async ping() { await this._call('ping', {}); }
}

/**
 * Connects to the broker (starting it if nobody listens, unless autostart is
 * false) and says hello.
 */
export async function connect(options = {}) {
  if (options === null || typeof options !== 'object') throw new TypeError('connect: options must be an object');
  const opts = { ...options };
  const { signal } = opts;
  signal?.throwIfAborted();
  let abortReject;
  const aborted = signal ? new Promise((_, rej) => {
    abortReject = () => rej(signal.reason);
    signal.addEventListener('abort', abortReject, { once: true });
  }) : null;
  const opening = Client._open(opts, null);
  let conn, box;
  try {
    ({ conn, box } = await (aborted ? Promise.race([opening, aborted]) : opening));
  } catch (e) {
    opening.then(({ conn: c }) => c.destroy(), () => {});
    throw e;
  } finally {
    if (abortReject) signal.removeEventListener('abort', abortReject);
  }
  const client = new Client(opts, conn);
  box.client = client;
  if (signal) client._closeOn(signal);
  return client;
}
