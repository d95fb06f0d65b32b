// records.js - client.records: the scope's stored completion records
// (record.get / record.list / record.purge).  Records are written by
// flight.complete / flight.fail with keep > 0 and survive broker restarts.
import { FlightFailedError, NotFoundError } from './errors.js';
import { takeResult } from './result-ref.js';
import { unpackValue, wireName } from './wire.js';
import { ms, str } from './util.js';

// Who wrote a record (its owner's hello) and the version its join carried;
// absent in records of an older broker.
function owner(r) {
  const o = {};
  if (r.client !== undefined) o.client = r.client;
  if (r.pid !== undefined) o.pid = r.pid;
  if (r.instance !== undefined) o.instance = r.instance;
  if (r.version !== undefined) o.version = r.version;
  return o;
}

export class Records {
  #client;
  constructor(client) { this.#client = client; }

  /**
   * The record of key, or null when there is none (or it expired):
   * {key, status: 'completed'|'failed', fence, value | error, retryable,
   * createdMs, expiresMs, client, pid, instance, version}.  value is decoded from MessagePack unless raw.
   * A record kept by reference is read into result (and value), or with
   * ref: true comes as resultRef (a ResultRef the caller closes; no value).
   */
  async get(key, { raw = false, ref = false, signal } = {}) {
    key = str(key, 'records.get');
    let r, conn;
    try {
      ({ r, conn } = await this.#client._callConn('record.get', { key: wireName(key) }));
    } catch (e) {
      if (e instanceof NotFoundError) return null;
      throw e;
    }
    const o = { key, status: r.status, fence: r.fence, createdMs: r.created_ms, expiresMs: r.expires_ms,
      ...owner(r) };
    if (r.status === 'completed') {
      Object.assign(o, await takeResult(conn, r, { ref, signal }));
      if (o.resultRef) return o;
      try {
        o.value = unpackValue(o.result, raw);
      } catch {
        o.value = undefined;        // not MessagePack (another client's bytes): see .result
      }
    } else {
      o.error = r.error;
      o.retryable = !!r.retryable;
    }
    return o;
  }

  /** Records whose key starts with prefix: [{key, status, fence, size, createdMs, expiresMs,
   * byRef}] (byRef: kept by reference, a file of size bytes). */
  async list(prefix = '', { limit } = {}) {
    const f = { prefix: wireName(str(prefix, 'records.list')) };
    const l = ms(limit, 'limit');
    if (l !== undefined) f.limit = l;
    const r = await this.#client._call('record.list', f);
    const out = (r.records || []).map((e) => ({ key: e.key, status: e.status, fence: e.fence, size: e.size,
      createdMs: e.created_ms, expiresMs: e.expires_ms, ...owner(e), ...(e.by_ref === true ? { byRef: true } : {}) }));
    if (r.truncated) out.truncated = true;
    return out;
  }

  /** Deletes the scope's records under prefix ('' = all) and ends the
   * flights of those keys (their owners' late complete/fail reject with a
   * FencedError, reason 'purged'; their followers with an AbortedError,
   * reason 'purged'); resolves the records deleted, or with counts: true
   * {deleted, fenced} (fenced: the flights ended). */
  async purge(prefix = '', { counts = false } = {}) {
    const r = await this.#client._call('record.purge', { prefix: wireName(str(prefix, 'records.purge')) });
    return counts ? { deleted: r.deleted, fenced: r.fenced ?? 0 } : r.deleted;
  }
}

export { FlightFailedError };
