// flight.js - single-flight: client.once(key, fn, options) and the lower-level
// client.flight.join / complete / fail / list.
//
// once(): joins the flight of `key`.  The first caller (or a follower promoted
// when the owner was lost) runs fn({fence, flight, signal}); everyone else
// waits for its result.  Result: {value, source, fence, ageMs} with source
// 'owner' (fn ran here), 'live' (another caller's run, delivered now) or
// 'record' (a stored completion record, maxAge).  fn's signal aborts on
// flight.abort (ttl passed: "deadline"; all followers left with
// abortWhenOrphaned: "orphaned"), on options.signal and on connection loss.
// A throwing fn becomes flight.fail {code: err.code or err.name, message}
// (options.retryable: boolean or err => boolean) and the error is rethrown to
// the owner; followers get a FlightFailedError, and once() joins again
// itself when the failure was retryable (up to MAX_RETRIES times).
//
// Values: by default fn's return value is MessagePack-encoded and followers'
// values are decoded (any value msgpack carries).  With `raw: true` fn must
// return a Uint8Array, sent as is, and value is the result's bytes (what
// other languages' clients, e.g. `coordctl once`, exchange).
//
// Options (ms unless said): ttl (owner_ttl_ms, default 30000), wait (wait_ms,
// default ttl; 0 = no limit), keep (keep_ms of the completion record, default
// 0), maxAge (accept a record this young), abortWhenOrphaned, signal, raw,
// retryable.
import { FencedError, FlightFailedError } from './errors.js';
import { packValue, unpackValue, wireName } from './wire.js';
import { anySignal, ms, str, withSignal } from './util.js';

// Retryable failures in a row before once() reports the last one (as coordctl once).
const MAX_RETRIES = 10;

function joinFields(key, o) {
  const f = { key: wireName(key) };
  const ttl = ms(o.ttl, 'ttl');
  const wait = ms(o.wait, 'wait');
  const maxAge = ms(o.maxAge, 'maxAge');
  if (ttl !== undefined) f.owner_ttl_ms = ttl;
  if (wait !== undefined) f.wait_ms = wait;
  if (maxAge !== undefined) f.max_age_ms = maxAge;
  if (o.abortWhenOrphaned) f.abort_when_orphaned = true;
  return f;
}

export class Flight {
  #client;
  #owned = new Map();       // flight id -> {ac, h}

  constructor(client) { this.#client = client; }

  /**
   * flight.join: resolves {role: 'owner', flight, fence, signal} |
   * {role: 'result', result, fence, ageMs, source} | {role: 'failed', error,
   * retryable, fence, ageMs, source}.  An owner must call complete() or fail()
   * (or close the client).
   */
  async join(key, options = {}) {
    key = str(key, 'flight.join');
    const { signal } = options;
    signal?.throwIfAborted();
    const client = this.#client;
    const release = client._hold();
    try {
      const req = await client._request('flight.join', joinFields(key, options));
      const r = await withSignal(req, signal, (late) => {
        // we left, but the join made us owner: hand the flight on
        if (late.role === 'owner')
          req.conn.call('flight.fail', { flight: late.flight, fence: late.fence,
            error: { code: 'ABORTED', message: 'the owner left' }, retryable: true }).catch(() => {});
      });
      if (r.role === 'owner') {
        const flight = client._id(r.flight, 'flight');
        const fence = client._id(r.fence, 'fence');
        const ac = new AbortController();
        const h = { lose: (err) => { this.#owned.delete(flight); ac.abort(err); } };
        this.#owned.set(flight, { ac, h });
        client._remember(h);
        return { role: 'owner', key, flight, fence, signal: ac.signal };
      }
      const base = { key, fence: r.fence === undefined ? undefined : client._id(r.fence, 'fence'),
        ageMs: r.age_ms, source: r.source };
      if (r.role === 'result') return { role: 'result', result: r.result, ...base };
      return { role: 'failed', error: r.error || { code: 'UNKNOWN', message: '' }, retryable: !!r.retryable, ...base };
    } finally {
      release();
    }
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

  /** flight.fail: error {code, message}; resolves {delivered}. */
  async fail(flight, fence, error = {}, { retryable = false, keep } = {}) {
    const f = { flight, fence, error: { code: `${error.code ?? 'ERROR'}`, message: `${error.message ?? ''}` }, retryable: !!retryable };
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
      followers: e.followers, ageMs: e.age_ms, completing: e.completing,
    }));
  }

  /** flight.abort from the broker. */
  _abort(ev) {
    const o = this.#owned.get(ev.flight);
    if (!o) return;
    const e = new FencedError(`flight aborted: ${ev.reason}`);
    e.reason = ev.reason;
    o.ac.abort(e);
  }
}

function errorCode(e) {
  if (e && typeof e.code === 'string' && e.code) return e.code.slice(0, 256);
  if (e && typeof e.name === 'string' && e.name) return e.name.slice(0, 256);
  return 'ERROR';
}

export async function once(client, key, fn, options = {}) {
  key = str(key, 'once');
  if (typeof fn !== 'function') throw new TypeError('once: fn must be a function');
  const { signal, raw = false, retryable = false } = options;
  let retries = 0;
  for (;;) {
    const j = await client.flight.join(key, options);
    if (j.role === 'result')
      return { value: unpackValue(j.result, raw), source: j.source, fence: j.fence, ageMs: j.ageMs };
    if (j.role === 'failed') {
      if (j.retryable && ++retries < MAX_RETRIES) continue;
      throw new FlightFailedError(j.error.code, j.error.message, j);
    }
    // owner
    const fnSignal = signal ? anySignal(j.signal, signal) : j.signal;
    let value;
    try {
      value = await fn({ fence: j.fence, flight: j.flight, key, signal: fnSignal });
    } catch (e) {
      const again = typeof retryable === 'function' ? !!retryable(e) : !!retryable;
      const msg = e && e.message !== undefined ? `${e.message}` : `${e}`;
      await client.flight.fail(j.flight, j.fence, { code: errorCode(e), message: msg.slice(0, 4096) },
        { retryable: again }).catch(() => {});
      throw e;
    }
    let bytes;
    try {
      bytes = packValue(value, raw, 'the value of once()');
    } catch (e) {
      await client.flight.fail(j.flight, j.fence, { code: 'BAD_VALUE', message: e.message }).catch(() => {});
      throw e;
    }
    const { delivered } = await client.flight.complete(j.flight, j.fence, bytes, { keep: options.keep });
    return { value, source: 'owner', fence: j.fence, ageMs: 0, delivered };
  }
}
