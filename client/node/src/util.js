// util.js - small helpers shared by the feature modules.

/** snake_case keys to camelCase, through maps and arrays (values kept). */
export function camel(v) {
  if (Array.isArray(v)) return v.map(camel);
  if (v && typeof v === 'object' && !(v instanceof Uint8Array)) {
    const o = {};
    for (const k of Object.keys(v)) o[k.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase())] = camel(v[k]);
    return o;
  }
  return v;
}

/** A duration option in ms: undefined stays undefined, else a non-negative integer. */
export function ms(v, what) {
  if (v === undefined || v === null) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || n > 2 ** 52)
    throw new TypeError(`${what} must be a non-negative number of milliseconds`);
  return Math.floor(n);
}

/** A duration for people: 500 -> "0.5 s", 30000 -> "30 s", 1250 -> "1.25 s". */
export function seconds(msValue) {
  return `${Number((msValue / 1000).toFixed(3))} s`;
}

/** A name argument: any JS value converted as WebIDL's DOMString (String()). */
export function str(v, what) {
  if (typeof v === 'symbol') throw new TypeError(`${what}: cannot convert a Symbol to a string`);
  return `${v}`;
}

/**
 * Waits for a cancellable request ({conn, rid, promise}) unless signal aborts
 * first: then sends cancel and rejects with the signal's reason.  onLate(reply)
 * gets a reply that crossed the cancel (so that what it granted is given back).
 */
export function withSignal(req, signal, onLate) {
  if (!signal) return req.promise;
  return new Promise((resolve, reject) => {
    let aborted = false;
    const onAbort = () => {
      aborted = true;
      req.conn.cancel(req.rid);
      reject(signal.reason);
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    req.promise.then((r) => {
      signal.removeEventListener('abort', onAbort);
      if (aborted) onLate?.(r); else resolve(r);
    }, (e) => {
      signal.removeEventListener('abort', onAbort);
      if (!aborted) reject(e);
    });
  });
}

/** p, unless signal aborts first: then rejects with the signal's reason
 * (p's own outcome is then ignored). */
export function untilAborted(p, signal) {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then((v) => {
      signal.removeEventListener('abort', onAbort);
      resolve(v);
    }, (e) => {
      signal.removeEventListener('abort', onAbort);
      reject(e);
    });
  });
}

/** A signal aborted when either a or b aborts (AbortSignal.any is 20.3+). */
export function anySignal(a, b) {
  if (typeof AbortSignal.any === 'function') return AbortSignal.any([a, b]);
  const ac = new AbortController();
  for (const s of [a, b]) {
    if (s.aborted) { ac.abort(s.reason); break; }
    s.addEventListener('abort', () => ac.abort(s.reason), { once: true });
  }
  return ac.signal;
}
