// locks.js - client.locks: the W3C Web Locks API's LockManager over coord.
//
// request() and query() follow the Web Locks spec (https://w3c.github.io/web-locks/)
// and its web-platform-tests: arguments are converted as WebIDL does (name
// with ToString, options as a dictionary read in member order, callback must
// be callable), every error is a rejected promise (TypeError, DOMException
// NotSupportedError, the signal's abort reason), the callback runs in a later
// task with a Lock (or null for ifAvailable not granted), and the request's
// promise settles with the callback's result only after lock.release's reply
// (the release took effect at the broker).
//
// A held lock can be lost: stolen (lock.lost "stolen"), its lease not renewed
// (lock.lost "expired"), or the connection gone.  Then, as the spec does for
// a stolen lock, the request's promise rejects at once (AbortError
// DOMException, or the connection's CoordError), lock.signal aborts with the
// same reason, and the callback's later result is ignored.  A lock lost
// before its callback started (its grant and its loss read together) never
// runs the callback: the request just rejects.  The holding record is made
// when the grant is read (connection.js: wire order), so no loss is missed.
//
// An abort of a request still waiting rejects at once with the signal's
// reason and sends `cancel`; if the grant crossed the cancel on the wire, the
// lock is released unused (the callback never runs).
//
// coord additions: options.timeout (ms, waiting), options.lease (ms, renewed
// every lease/3 while the callback runs), lock.token (fencing token) and
// lock.signal.  query() entries carry conn, client, pid, token, ageMs beside
// name, mode and clientId.  Names starting with '-' (the broker's, e.g.
// leadership's '-leader/...') are left out of query(), as a page never sees
// such names.
import { CoordError, printable } from './errors.js';
import { wireName } from './wire.js';

const MODES = ['exclusive', 'shared'];

/** The lock a callback gets: {name, mode} as in Web Locks, plus token and signal. */
export class Lock {
  #name; #mode; #token; #h;
  // h: the holding record (LockManager#track); its AbortController is made
  // on the first read of signal, already aborted if the lock was lost
  constructor(name, mode, token, h) {
    this.#name = name; this.#mode = mode; this.#token = token; this.#h = h;
  }
  get name() { return this.#name; }
  get mode() { return this.#mode; }
  /** Fencing token: strictly increasing per name across grants and restarts. */
  get token() { return this.#token; }
  /** Aborted when the lock is lost (stolen, lease expired, connection gone). */
  get signal() {
    const h = this.#h;
    if (!h.ac) {
      h.ac = new AbortController();
      if (h.lost) h.ac.abort(h.reason);
    }
    return h.ac.signal;
  }
  get [Symbol.toStringTag]() { return 'Lock'; }
}

function toMs(v, what) {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || n > 2 ** 52)
    throw new TypeError(`LockManager.request: ${what} must be a non-negative number of milliseconds`);
  return Math.floor(n);
}

// The WebIDL LockOptions dictionary, members read in lexicographic order
// (ifAvailable, lease, mode, signal, steal, timeout).
function readOptions(o) {
  if (o === undefined || o === null) o = {};
  else if (typeof o !== 'object' && typeof o !== 'function')
    throw new TypeError("LockManager.request: The provided value can't be converted to a dictionary.");
  const ifAvailable = Boolean(o.ifAvailable);
  const lease = toMs(o.lease, 'lease');
  let mode = o.mode;
  if (mode === undefined) mode = 'exclusive';
  else {
    mode = `${mode}`;
    if (!MODES.includes(mode))
      throw new TypeError(`LockManager.request: '${mode}' is not a valid value for enumeration LockMode.`);
  }
  const signal = o.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal))
    throw new TypeError("LockManager.request: member signal is not of type 'AbortSignal'.");
  const steal = Boolean(o.steal);
  const timeout = toMs(o.timeout, 'timeout');
  return { ifAvailable, lease, mode, signal, steal, timeout };
}

const notSupported = (msg) => new DOMException(msg, 'NotSupportedError');

export class LockManager {
  #client;
  #held = new Map();        // lock id -> holding record

  constructor(client) {
    this.#client = client;
  }

  get [Symbol.toStringTag]() { return 'LockManager'; }

  /**
   * request(name, callback) / request(name, options, callback): see the Web
   * Locks API.  Resolves with the callback's result after the release.
   */
  request(name, ...rest) {
    try {
      return this.#request(name, rest);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  #request(name, rest) {
    if (rest.length < 1)
      throw new TypeError('LockManager.request: At least 2 arguments required.');
    if (typeof name === 'symbol')
      throw new TypeError('LockManager.request: cannot convert a Symbol to a string');
    name = `${name}`;
    let options, callback;
    if (rest.length === 1) {
      options = readOptions(undefined);
      callback = rest[0];
    } else {
      options = readOptions(rest[0]);
      callback = rest[1];
    }
    if (typeof callback !== 'function')
      throw new TypeError('LockManager.request: callback is not a function.');

    // the spec's request steps, in order
    if (name.startsWith('-'))
      throw notSupported("LockManager.request: Names starting with '-' are reserved.");
    if (options.steal && options.ifAvailable)
      throw notSupported("LockManager.request: The 'steal' and 'ifAvailable' options cannot be used together.");
    if (options.steal && options.mode !== 'exclusive')
      throw notSupported("LockManager.request: The 'steal' option may only be used with 'exclusive' locks.");
    if (options.signal && (options.steal || options.ifAvailable))
      throw notSupported("LockManager.request: The 'signal' option may not be used with 'steal' or 'ifAvailable'.");
    if (options.timeout !== undefined && (options.steal || options.ifAvailable))
      throw notSupported("LockManager.request: The 'timeout' option may not be used with 'steal' or 'ifAvailable'.");
    if (options.signal?.aborted) return Promise.reject(options.signal.reason);

    return new Promise((resolve, reject) => this.#acquire(name, options, callback, resolve, reject));
  }

  async #acquire(name, options, callback, resolve, reject) {
    const client = this.#client;
    const { signal } = options;
    let settled = false;
    const settle = (fn, v) => { if (!settled) { settled = true; fn(v); } };
    let req;
    let onAbort;
    let h = null;
    const release = client._hold();
    try {
      const fields = { name: wireName(name), mode: options.mode };
      if (options.ifAvailable) fields.if_available = true;
      if (options.steal) fields.steal = true;
      if (options.timeout !== undefined) fields.timeout_ms = options.timeout;
      if (options.lease) fields.lease_ms = options.lease;
      // the holding record exists from the moment the grant is read, so
      // that a lock.lost right behind it (same read) finds it
      const onReply = (r) => {
        if (r.granted && Number.isSafeInteger(r.lock) && r.lock >= 0)
          h = this.#track(r.lock, settle, reject);
      };
      req = client._requestNow('lock.acquire', fields, onReply) ??
        await client._request('lock.acquire', fields, { onReply, signal });
      if (signal) {
        onAbort = () => {
          settle(reject, signal.reason);
          req.conn.cancel(req.rid);
        };
        if (signal.aborted) onAbort();
        else signal.addEventListener('abort', onAbort, { once: true });
      }
      let r;
      try {
        r = await req.promise;
      } finally {
        if (onAbort) signal.removeEventListener('abort', onAbort);
      }
      if (h) h.conn = req.conn;
      if (settled && !(h && h.lost)) {
        // aborted, but the grant crossed our cancel: give the lock back unused
        if (h) this.#untrack(h);
        if (r.granted) req.conn.call('lock.release', { lock: r.lock }).catch(() => {});
        return;
      }
      if (!r.granted) {
        // ifAvailable not granted: the callback gets null, nothing to release
        try {
          settle(resolve, await callback(null));
        } catch (e) {
          settle(reject, e);
        }
        return;
      }
      if (!h) {                   // a grant without a usable lock id
        client._id(r.lock, 'lock');
        return;
      }
      await this.#hold(h, name, options, r, callback, settle, resolve, reject);
    } catch (e) {
      if (h) this.#untrack(h);
      settle(reject, e);
    } finally {
      release();
    }
  }

  // The record of a held lock, made when its grant is read: lock.lost and
  // the connection's loss reach it through h.lose.
  #track(lockId, settle, reject) {
    const client = this.#client;
    // ac: the lock's AbortController, made when lock.signal is first read
    // (most callbacks never read it); reason: why it was lost
    const h = { id: lockId, lost: false, reason: undefined, conn: null, renew: null, ac: null };
    h.lose = (reason) => {
      if (h.lost) return;
      h.lost = true;
      h.reason = reason;
      this.#held.delete(lockId);
      if (h.renew) clearInterval(h.renew);
      client._forget(h);
      h.ac?.abort(reason);
      settle(reject, reason);
    };
    this.#held.set(lockId, h);
    client._remember(h);          // connection loss -> h.lose(err)
    return h;
  }

  #untrack(h) {
    if (this.#held.get(h.id) === h) this.#held.delete(h.id);
    if (h.renew) clearInterval(h.renew);
    this.#client._forget(h);
  }

  async #hold(h, name, options, r, callback, settle, resolve, reject) {
    const client = this.#client;
    const { conn } = h;
    const lockId = h.id;
    if (h.lost) return;           // lost with its grant (same read): already rejected, the callback never runs
    let token;
    try {
      token = client._id(r.token, 'token');
    } catch (e) {
      this.#untrack(h);
      conn.call('lock.release', { lock: lockId }).catch(() => {});
      throw e;
    }
    if (options.lease) {
      h.renew = setInterval(() => {
        conn.call('lock.renew', { lock: lockId, lease_ms: options.lease }).catch((e) => {
          if (e.code === 'UNKNOWN_LOCK')
            h.lose(new DOMException(`the lease of lock '${printable(name)}' expired`, 'AbortError'));
        });
      }, Math.max(1, Math.floor(options.lease / 3)));
      h.renew.unref();
    }
    const lock = new Lock(name, options.mode, token, h);
    let ok, value;
    try {
      value = callback(lock);
      // a promise (or thenable) is waited for; a plain value needs no turn
      if (value !== null && (typeof value === 'object' || typeof value === 'function') &&
          typeof value.then === 'function')
        value = await value;
      ok = true;
    } catch (e) {
      value = e;
      ok = false;
    }
    if (h.lost) return;           // already rejected when it was lost
    if (h.renew) clearInterval(h.renew);
    try {
      await conn.call('lock.release', { lock: lockId });
    } catch (e) {
      if (h.lost) return;
      if (e.code !== 'UNKNOWN_LOCK') {   // UNKNOWN_LOCK: lost just now, lock.lost follows
        h.lose(e);
        return;
      }
    }
    this.#untrack(h);
    settle(ok ? resolve : reject, value);
  }

  /** lock.lost from the broker. */
  _lost(ev) {
    const h = this.#held.get(ev.lock);
    if (!h) return;
    const name = printable(ev.name);
    h.lose(new DOMException(ev.reason === 'stolen' ? `the lock '${name}' was stolen`
      : ev.reason === 'expired' ? `the lease of lock '${name}' expired`
        : `the lock '${name}' was lost (${printable(ev.reason)})`, 'AbortError'));
  }

  /** {held, pending} as in Web Locks: held in grant order, pending in request order. */
  async query() {
    const r = await this.#client._call('lock.query', {});
    const entry = (e) => {
      const o = {
        name: e.name, mode: e.mode, clientId: this.#client._clientIdOf(e.conn),
        conn: e.conn, client: e.client, pid: e.pid, ageMs: e.age_ms,
      };
      if (e.token !== undefined) o.token = e.token;
      return o;
    };
    const keep = (e) => typeof e.name === 'string' && !e.name.startsWith('-');
    return {
      held: (r.held || []).filter(keep).map(entry),
      pending: (r.pending || []).filter(keep).map(entry),
    };
  }
}

export { CoordError };
