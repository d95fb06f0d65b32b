// flight.js - single-flight: client.once(key, fn, options) and the lower-level
// client.flight.join / complete / fail / list / disable / enable / disabled.
//
// once(): joins the flight of `key`.  The first caller (or a follower promoted
// when the owner was lost) runs fn({fence, flight, key, signal, stale,
// bypass}); everyone else waits for its result.  Result: {value, source,
// fence, ageMs, stale, revalidating} with source (the same words as the
// Python client's)
//   'owner'   fn ran here (also: delivered, revalidated);
//   'bypass'  fn ran here, the kill switch on for the key (bypass: true);
//   'live'    another caller's run, delivered now;
//   'record'  a stored completion record younger than maxAge;
//   'stale'   a stored record older than that but inside the stale window,
//             served at once (stale: true); revalidating tells whether a
//             revalidation runs meanwhile;
//   'local'   fn ran here without coordination: the broker could not be
//             reached, or a follower's wait passed, and options.fallback is
//             'run' or 'retry' (also: reason, the error; fallbackCause
//             'unreachable' | 'timeout').
// With stale and keep, the record is kept keep + stale ms (as the Python
// client does), so that it can still be served stale.
// fn's signal aborts on flight.abort (ttl passed: "deadline"; all followers
// left with abortWhenOrphaned: "orphaned"), on options.signal and on
// connection loss.
//
// Stale-while-revalidate (options.stale, ms): a completed record older than
// maxAge but younger than maxAge + stale is served at once (source 'stale')
// while one caller revalidates it: that caller is the owner and
// its fn gets ctx.stale = {value, ageMs, fence} (the stale record).  With
// options.notify or options.onUpdated, a caller served stale while a
// revalidation runs is told when it ends: onUpdated({key, status:
// 'completed' | 'failed', fence}) once, and the client's 'flight.updated'
// event (detail the same) for every such notice.  onUpdated gets status
// 'lost' (and error) when the connection is lost first; while one is due the
// process is kept alive.
//
// Failures: a throwing fn becomes flight.fail {code: err.code or err.name,
// message} (options.retryable: boolean or err => boolean) and the error is
// rethrown to the owner; followers get a FlightFailedError, and once() joins
// again itself when the failure was retryable (up to MAX_RETRIES times).
// A fn that throws once options.signal aborted (the owner's caller left)
// fails the flight retryable, code ABORTED: a follower then runs it.
// Backoff: a fn that throws a RetryAfterError(ms) (or any error with a
// numeric `retryAfter`, ms) fails the flight retryable with retry_after_ms;
// its followers, and every join during the backoff, reject with a
// BackoffError (a FlightFailedError: .retryAfter the ms left, .source
// 'backoff', or 'live' for the followers of the failing run).
//
// Fallback (options.fallback): when the broker cannot be reached (the client
// is reconnecting and its next attempt to connect, autostart included,
// fails; the connection is gone; or it drops while this caller waits or
// runs), 'fail' (the default) rejects with that error (ConnectError,
// ClosedError, or SHUTTING_DOWN), 'run' runs fn here without coordination
// and resolves with source 'local' (reason: the error).  A follower whose
// wait passes (TimeoutError) falls back the same way: 'fail' rejects, 'run'
// runs fn here (fallbackCause 'timeout'), 'retry' joins once more first
// (retried: true; the owner if the old one is gone by now, else a second
// wait) and runs fn here after a second timeout.  Only for work that is safe
// to repeat.  A client closed by close() always rejects.  An owner whose connection drops keeps fn's value: 'run' resolves
// it as 'local', 'fail' rejects.
//
// Values: by default fn's return value is MessagePack-encoded and followers'
// values are decoded (any value msgpack carries).  With `raw: true` fn must
// return a Uint8Array, sent as is, and value is the result's bytes (what
// other languages' clients, e.g. `coordctl once`, exchange).
//
// Options (ms unless said): ttl (owner_ttl_ms, default 30000), wait (wait_ms,
// default ttl; 0 = no limit), keep (keep_ms of the completion record, default
// 0), maxAge (accept a record this young), stale, notify, onUpdated,
// abortWhenOrphaned, signal, raw, retryable, fallback; supersede (the running
// owner's work is stale: take the flight over; its fn's signal aborts with
// reason 'superseded', its late result is FENCED, its followers get ours;
// result.superseded: the old owner's fence), priority (a higher one than the
// owner's supersedes it), version (of the code that runs fn, at most 64
// bytes; kept in the flight and its record), otherVersion ('follow', the
// default: follow a running flight of another version; 'own': run one of
// our own beside it and never take another version's record).
import { BackoffError, FencedError, FlightFailedError } from './errors.js';
import { takeResult } from './result-ref.js';
import { packValue, unpackValue, wireName } from './wire.js';
import { anySignal, ms, str, withSignal } from './util.js';

// Retryable failures in a row before once() reports the last one (as coordctl once).
const MAX_RETRIES = 10;

// The broker's limit of keep_ms (366 days): keep + stale is lowered to it.
const MAX_KEEP_MS = 31_622_400_000;

// The broker's limit on a flight's version (bytes).
const MAX_VERSION = 64;

// The protocol's limits on a flight's failure (coord-wire-limits.h's
// LIMIT_ERROR_CODE and LIMIT_ERROR_MESSAGE, bytes): an owner's error is cut
// to them before flight.fail.
const MAX_ERROR_CODE = 256;
const MAX_ERROR_MESSAGE = 4096;

// The longest wait the protocol takes (LIMIT_WAIT_MS, 24 h): an error's
// retryAfter is lowered to it.
const MAX_WAIT_MS = 86_400_000;

// Error codes that mean "the broker cannot be reached" for the fallback policy.
const UNREACHABLE = new Set(['CONNECT', 'CLOSED', 'SHUTTING_DOWN']);

function joinFields(key, o) {
  const f = { key: wireName(key) };
  const ttl = ms(o.ttl, 'ttl');
  const wait = ms(o.wait, 'wait');
  const maxAge = ms(o.maxAge, 'maxAge');
  const stale = ms(o.stale, 'stale');
  if (ttl !== undefined) f.owner_ttl_ms = ttl;
  if (wait !== undefined) f.wait_ms = wait;
  if (maxAge !== undefined) f.max_age_ms = maxAge;
  if (stale !== undefined) f.stale_ms = stale;
  if (o.notify || o.onUpdated) f.notify = true;
  if (o.abortWhenOrphaned) f.abort_when_orphaned = true;
  if (o.supersede) f.supersede = true;
  const priority = ms(o.priority, 'priority');
  if (priority) f.priority = priority;
  if (o.version !== undefined && o.version !== null) {
    const v = str(o.version, 'version');
    if (Buffer.byteLength(v) > MAX_VERSION) throw new TypeError(`version: at most ${MAX_VERSION} bytes`);
    f.version = wireName(v);
  }
  if (o.otherVersion !== undefined) {
    if (o.otherVersion !== 'follow' && o.otherVersion !== 'own')
      throw new TypeError("otherVersion must be 'follow' or 'own'");
    f.other_version = o.otherVersion;
  }
  return f;
}

function errorFields(error) {
  return { code: `${error?.code ?? 'ERROR'}`, message: `${error?.message ?? ''}` };
}

export class Flight {
  #client;
  #owned = new Map();       // flight id -> {ac, h}
  #updates = new Map();     // key -> [waiter {onUpdated, h}], oldest first

  constructor(client) { this.#client = client; }

  /**
   * flight.join: resolves {role: 'owner', flight, fence, signal, stale?,
   * bypass} | {role: 'result', result, fence, ageMs, source, stale,
   * revalidating} | {role: 'failed', error, retryable, retryAfter?, fence,
   * ageMs, source}.  An owner must call complete() or fail() (or close the
   * client).  options: ttl, wait, maxAge, stale, notify, onUpdated,
   * abortWhenOrphaned, signal; attempt (internal: see Client#current).
   * A result by reference (result-ref.js) is read into `result` (a Buffer;
   * `signal` stops the read), or with options.ref comes as `resultRef` (a
   * ResultRef the caller owns and closes) instead; the same for `stale`.
   */
  async join(key, options = {}) {
    key = str(key, 'flight.join');
    const { signal, onUpdated } = options;
    if (onUpdated !== undefined && typeof onUpdated !== 'function')
      throw new TypeError('flight.join: onUpdated must be a function');
    signal?.throwIfAborted();
    const client = this.#client;
    const release = client._hold();
    try {
      // an owner is tracked from the moment its reply is read, so that a
      // flight.abort right behind it (same read) finds it
      let owned = null;
      const onReply = (r) => {
        if (r.role === 'owner' && Number.isSafeInteger(r.flight) && r.flight >= 0) owned = this.#own(r.flight);
        if (onUpdated && r.role === 'result' && r.stale === true && r.revalidating === true && !signal?.aborted)
          this.#expectUpdate(key, onUpdated);
      };
      const req = await client._request('flight.join', joinFields(key, options),
        { onReply, attempt: !!options.attempt, signal });
      const r = await withSignal(req, signal, (late) => {
        // nobody reads a late result by reference: release the broker's hold
        const lateRef = late.result_ref ?? late.stale?.result_ref;
        if (lateRef && lateRef.ref !== undefined)
          req.conn.call('flight.unref', { ref: lateRef.ref }).catch(() => {});
        // we left, but the join made us owner: hand the flight on
        if (late.role === 'owner') {
          if (owned) this.#done(late.flight);
          req.conn.call('flight.fail', { flight: late.flight, fence: late.fence,
            error: { code: 'ABORTED', message: 'the owner left' }, retryable: true }).catch(() => {});
        }
      });
      if (r.role === 'owner') {
        let flight, fence;
        try {
          flight = client._id(r.flight, 'flight');
          fence = client._id(r.fence, 'fence');
        } catch (e) {
          if (owned) this.#done(r.flight);
          throw e;
        }
        const { ac } = owned;
        const o = { role: 'owner', key, flight, fence, signal: ac.signal, bypass: r.bypass === true };
        if (r.superseded !== undefined) o.superseded = client._id(r.superseded, 'superseded');
        if (r.version !== undefined) o.version = r.version;
        if (r.stale && typeof r.stale === 'object')
          o.stale = { ...await takeResult(req.conn, r.stale, options), ageMs: r.stale.age_ms, fence: r.stale.fence };
        return o;
      }
      const base = { key, fence: r.fence === undefined ? undefined : client._id(r.fence, 'fence'),
        ageMs: r.age_ms, source: r.source };
      if (r.role === 'result')
        return { role: 'result', ...await takeResult(req.conn, r, options), ...base, stale: r.stale === true,
          revalidating: r.revalidating === true };
      const o = { role: 'failed', error: r.error || { code: 'UNKNOWN', message: '' }, retryable: !!r.retryable, ...base };
      if (r.retry_after_ms !== undefined) o.retryAfter = r.retry_after_ms;
      return o;
    } finally {
      release();
    }
  }

  // The record of an owned flight: flight.abort and the connection's loss
  // abort its signal.
  #own(flight) {
    const client = this.#client;
    const ac = new AbortController();
    const h = { lose: (err) => { this.#owned.delete(flight); client._forget(h); ac.abort(err); } };
    const o = { ac, h };
    this.#owned.set(flight, o);
    client._remember(h);
    return o;
  }

  #done(flight) {
    const o = this.#owned.get(flight);
    if (!o) return;
    this.#owned.delete(flight);
    this.#client._forget(o.h);
  }

  /** flight.complete: resolves {delivered}; FencedError when no longer owner. */
  async complete(flight, fence, result, { keep } = {}) {
    if (!(result instanceof Uint8Array)) throw new TypeError('flight.complete: result must be a Uint8Array');
    const f = { flight, fence, result };
    const k = ms(keep, 'keep');
    if (k) f.keep_ms = k;
    try {
      const r = await this.#client._call('flight.complete', f);
      return { delivered: r.delivered };
    } finally {
      this.#done(flight);
    }
  }

  /** flight.fail: error {code, message}; options retryable, retryAfter (ms:
   * a backoff; implies retryable), keep.  Resolves {delivered}. */
  async fail(flight, fence, error = {}, { retryable, retryAfter, keep } = {}) {
    const after = ms(retryAfter, 'retryAfter');
    if (after !== undefined && retryable === false)
      throw new TypeError('flight.fail: retryAfter needs a retryable failure');
    const f = { flight, fence, error: errorFields(error), retryable: after !== undefined || !!retryable };
    if (after !== undefined) f.retry_after_ms = after;
    const k = ms(keep, 'keep');
    if (k) f.keep_ms = k;
    try {
      const r = await this.#client._call('flight.fail', f);
      return { delivered: r.delivered };
    } finally {
      this.#done(flight);
    }
  }

  /** The scope's running flights (camelCase fields). */
  async list() {
    const r = await this.#client._call('flight.list', {});
    return (r.flights || []).map((e) => ({
      key: e.key, flight: e.flight, fence: e.fence, ownerConn: e.owner_conn, ownerPid: e.owner_pid,
      followers: e.followers, ageMs: e.age_ms, completing: e.completing, version: e.version,
    }));
  }

  /** The kill switch: joins of keys under prefix ('' = all) bypass
   * single-flight (each caller owns, no record) until enable(prefix). */
  async disable(prefix) {
    await this.#client._call('flight.disable', { prefix: wireName(str(prefix, 'flight.disable')) });
  }

  async enable(prefix) {
    await this.#client._call('flight.enable', { prefix: wireName(str(prefix, 'flight.enable')) });
  }

  /** The scope's disabled prefixes (an array; .truncated when cut short). */
  async disabled() {
    const r = await this.#client._call('flight.disabled', {});
    const out = [...(r.prefixes || [])];
    if (r.truncated) out.truncated = true;
    return out;
  }

  /** flight.abort from the broker. */
  _abort(ev) {
    const o = this.#owned.get(ev.flight);
    if (!o) return;
    const e = new FencedError(`flight aborted: ${ev.reason}`);
    e.reason = ev.reason;
    o.ac.abort(e);
  }

  // A caller served stale with onUpdated: its notice is due (kept alive).
  #expectUpdate(key, onUpdated) {
    const client = this.#client;
    const w = { onUpdated };
    w.lose = (err) => {
      this.#dropWaiter(key, w);
      client._forget(w);
      call(onUpdated, { key, status: 'lost', fence: undefined, error: err });
    };
    let list = this.#updates.get(key);
    if (!list) this.#updates.set(key, (list = []));
    list.push(w);
    client._remember(w);
  }

  #dropWaiter(key, w) {
    const list = this.#updates.get(key);
    if (!list) return;
    const i = list.indexOf(w);
    if (i >= 0) list.splice(i, 1);
    if (!list.length) this.#updates.delete(key);
  }

  /** flight.updated from the broker: the oldest waiter of the key, then the event. */
  _updated(ev) {
    const detail = { key: ev.key, status: ev.status, fence: ev.fence };
    const w = this.#updates.get(ev.key)?.[0];
    if (w) {
      this.#dropWaiter(ev.key, w);
      this.#client._forget(w);
      call(w.onUpdated, { ...detail });
    }
    this.#client.dispatchEvent(new CustomEvent('flight.updated', { detail }));
  }
}

// Calls a user callback; what it throws is reported as an uncaught exception
// (as an EventTarget listener's would be), never into the client.
function call(cb, arg) {
  try {
    cb(arg);
  } catch (e) {
    process.nextTick(() => { throw e; });
  }
}

/** s cut to at most max bytes of UTF-8, at a character's boundary. */
function cutUtf8(s, max) {
  if (Buffer.byteLength(s) <= max) return s;
  const b = Buffer.from(s);
  let end = max;
  while (end > 0 && (b[end] & 0xc0) === 0x80) end--;   // b[end] continues a character: drop it
  return b.subarray(0, end).toString();
}

function errorCode(e) {
  if (e && typeof e.code === 'string' && e.code) return cutUtf8(e.code, MAX_ERROR_CODE);
  if (e && typeof e.name === 'string' && e.name) return cutUtf8(e.name, MAX_ERROR_CODE);
  return 'ERROR';
}

/** The backoff an error asks for (RetryAfterError, or any numeric retryAfter), in ms. */
function retryAfterOf(e) {
  const v = e?.retryAfter;
  return typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.min(Math.floor(v), MAX_WAIT_MS) : undefined;
}

const unreachable = (client, e) => !client._closedByUser && e instanceof Error && UNREACHABLE.has(e.code);

async function runLocal(key, fn, options, reason, retried = false) {
  const signal = options.signal ?? new AbortController().signal;
  const value = await fn({ key, fence: undefined, flight: undefined, signal, stale: undefined, bypass: false, local: true });
  return { value, source: 'local', fence: undefined, ageMs: 0, stale: false, revalidating: false, reason,
    fallbackCause: reason?.code === 'TIMEOUT' ? 'timeout' : 'unreachable', retried };
}

export async function once(client, key, fn, options = {}) {
  key = str(key, 'once');
  if (typeof fn !== 'function') throw new TypeError('once: fn must be a function');
  const { raw = false, fallback = 'fail' } = options;
  if (fallback !== 'fail' && fallback !== 'run' && fallback !== 'retry')
    throw new TypeError("once: fallback must be 'fail', 'run' or 'retry'");
  ms(options.keep, 'keep');                  // refused before anything runs
  let retries = 0;
  let retried = false;
  let joinOptions = { ...options, attempt: true, ref: false };
  for (;;) {
    let j;
    try {
      j = await client.flight.join(key, joinOptions);
    } catch (e) {
      const timedOut = e instanceof Error && e.code === 'TIMEOUT';
      if (timedOut && fallback === 'retry' && !retried) {
        // retry ownership: the owner may be gone by now, else wait once
        // more (never supersede twice)
        retried = true;
        joinOptions = { ...joinOptions, supersede: false };
        continue;
      }
      if (fallback !== 'fail' && (timedOut || unreachable(client, e)))
        return runLocal(key, fn, options, e, retried);
      throw e;
    }
    if (j.role === 'result') {
      return { value: unpackValue(j.result, raw), source: j.stale ? 'stale' : j.source, fence: j.fence,
        ageMs: j.ageMs, stale: j.stale, revalidating: j.revalidating, retried };
    }
    if (j.role === 'failed') {
      const info = { fence: j.fence, source: j.source, ageMs: j.ageMs };
      if (j.retryAfter !== undefined)
        throw new BackoffError(j.error.code, j.error.message, { ...info, retryAfter: j.retryAfter });
      if (j.retryable && ++retries < MAX_RETRIES) continue;
      throw new FlightFailedError(j.error.code, j.error.message, { ...info, retryable: j.retryable });
    }
    const r = await own(client, key, fn, options, j);
    r.retried = retried;
    return r;
  }
}

// once() as the owner j: runs fn, completes or fails the flight.
async function own(client, key, fn, options, j) {
  const { signal, raw = false, retryable = false, fallback = 'fail' } = options;
  // the connection dropped under us: nothing can reach the broker any more
  const cut = () => (j.signal.aborted && unreachable(client, j.signal.reason) ? j.signal.reason : null);
  const fnSignal = signal ? anySignal(j.signal, signal) : j.signal;
  let value;
  try {
    const stale = j.stale ? { value: unpackValue(j.stale.result, raw), ageMs: j.stale.ageMs, fence: j.stale.fence } : undefined;
    value = await fn({ fence: j.fence, flight: j.flight, key, signal: fnSignal, stale, bypass: j.bypass });
  } catch (e) {
    if (signal?.aborted && !cut()) {
      // this caller left (its own signal): not a failure of the work, the
      // followers join again and one of them runs it (as a join's abort
      // hands an owner's flight on, and as the Python client does for an
      // interrupted owner)
      await client.flight.fail(j.flight, j.fence, { code: 'ABORTED', message: 'the owner left' },
        { retryable: true }).catch(() => {});
    } else if (!cut()) {
      const after = retryAfterOf(e);
      const again = after !== undefined || (typeof retryable === 'function' ? !!retryable(e) : !!retryable);
      const msg = e && e.message !== undefined ? `${e.message}` : `${e}`;
      await client.flight.fail(j.flight, j.fence, { code: errorCode(e), message: cutUtf8(msg, MAX_ERROR_MESSAGE) },
        { retryable: again, retryAfter: after }).catch(() => {});
    }
    throw e;
  }
  const lost = cut();
  if (lost) {
    if (fallback !== 'fail')
      return { value, source: 'local', fence: j.fence, ageMs: 0, stale: false, revalidating: false, reason: lost,
        fallbackCause: 'unreachable' };
    throw lost;
  }
  let bytes;
  try {
    bytes = packValue(value, raw, 'the value of once()');
  } catch (e) {
    await client.flight.fail(j.flight, j.fence, { code: 'BAD_VALUE', message: e.message }).catch(() => {});
    throw e;
  }
  let delivered;
  const keep = ms(options.keep, 'keep');
  const stale = ms(options.stale, 'stale');
  try {
    ({ delivered } = await client.flight.complete(j.flight, j.fence, bytes,
      { keep: keep && stale ? Math.min(keep + stale, MAX_KEEP_MS) : keep }));
  } catch (e) {
    if (fallback !== 'fail' && unreachable(client, e))
      return { value, source: 'local', fence: j.fence, ageMs: 0, stale: false, revalidating: false, reason: e,
        fallbackCause: 'unreachable' };
    throw e;
  }
  const r = { value, source: j.bypass ? 'bypass' : 'owner', fence: j.fence, ageMs: 0, stale: false, revalidating: false,
    delivered, bypass: j.bypass, revalidated: !!j.stale };
  if (j.superseded !== undefined) r.superseded = j.superseded;
  return r;
}
