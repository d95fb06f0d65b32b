// leader.js - leadership: client.leader(workstream[, options], async (leader) => ...)
// and client.leaders.info / disable / enable.
//
// leader() campaigns (leader.campaign: options lease, steal, ifAvailable,
// timeout, signal), then runs the callback as leader with a Leader object
// {workstream, generation, leaseMs, state, signal, commit, read}.  The lease is
// renewed every lease/3 while the callback runs; when the callback settles the
// client resigns and leader() settles with the callback's result (after the
// resign's reply).  ifAvailable not granted: the callback gets null, as
// Web Locks' request does.
//
// Leadership lost (lease expired, stolen, disabled, connection gone): state
// becomes ABORTED, leader.signal aborts with a FencedError (its .reason is the
// broker's: expired, stolen, disabled, or the connection's error), and
// leader() rejects at once with that error; the callback's later result is
// ignored and its commits get FENCED.  This is the Web Locks rule for a
// stolen lock, applied to leadership.
//
// States: FOLLOWER (not leading: before the campaign, or ifAvailable refused),
// REQUESTING (campaigning), LEADER, RELEASED (resigned), ABORTED (lost).
//
// Values of commit/read are MessagePack-encoded by default; with
// options.raw they are Uint8Array as is (what other languages see).
import { FencedError, NotFoundError } from './errors.js';
import { packValue, unpackValue, wireName } from './wire.js';
import { ms, str, withSignal } from './util.js';

export const LeaderState = Object.freeze({
  FOLLOWER: 'FOLLOWER', REQUESTING: 'REQUESTING', LEADER: 'LEADER', RELEASED: 'RELEASED', ABORTED: 'ABORTED',
});

export class Leader {
  #client; #raw; #ac = new AbortController();
  constructor(client, workstream, raw) {
    this.#client = client;
    this.#raw = raw;
    this.workstream = workstream;
    this.generation = 0;
    this.leaseMs = 0;
    this.state = LeaderState.FOLLOWER;
  }

  /** Aborted when the leadership is lost. */
  get signal() { return this.#ac.signal; }

  _abort(err) { this.#ac.abort(err); }

  /**
   * Applies key = value if this generation is still the live one, at most once
   * per opId: {applied: true} or {applied: false, duplicate: true, generation}.
   * FencedError when the leadership is gone.
   */
  async commit(opId, key, value) {
    const r = await this.#client._call('leader.commit', {
      workstream: wireName(this.workstream), generation: this.generation,
      op_id: wireName(str(opId, 'commit: opId')), key: wireName(str(key, 'commit: key')),
      value: packValue(value, this.#raw, 'commit: value'),
    });
    const o = { applied: !!r.applied };
    if (r.duplicate) { o.duplicate = true; o.generation = r.generation; }
    return o;
  }

  /** The committed value of key: {value, generation}, or null. */
  read(key) { return readKey(this.#client, this.workstream, key, this.#raw); }
}

async function readKey(client, workstream, key, raw) {
  try {
    const r = await client._call('leader.read', { workstream: wireName(workstream), key: wireName(str(key, 'read: key')) });
    return { value: unpackValue(r.value, raw), generation: r.generation };
  } catch (e) {
    if (e instanceof NotFoundError) return null;
    throw e;
  }
}

export class Leaders {
  #client;
  #live = new Map();        // workstream \0 generation -> holder

  constructor(client) { this.#client = client; }

  /** leader.info: {generation, state, disabled, ...} in camelCase. */
  async info(workstream) {
    const r = await this.#client._call('leader.info', { workstream: wireName(str(workstream, 'leaders.info')) });
    const o = {};
    for (const [k, v] of Object.entries(r)) {
      if (k === 'rid' || k === 'ok') continue;
      o[k.replace(/_([a-z])/g, (_, c) => c.toUpperCase())] = v;
    }
    return o;
  }

  /** The incident kill switch: fences the leader, refuses campaigns; resolves {generation}. */
  async disable(workstream) {
    const r = await this.#client._call('leader.disable', { workstream: wireName(str(workstream, 'leaders.disable')) });
    return { generation: r.generation };
  }

  async enable(workstream) {
    await this.#client._call('leader.enable', { workstream: wireName(str(workstream, 'leaders.enable')) });
  }

  /** Reads a committed value without leading. */
  read(workstream, key, { raw = false } = {}) {
    return readKey(this.#client, str(workstream, 'leaders.read'), key, raw);
  }

  _track(key, h) { this.#live.set(key, h); }
  _untrack(key) { this.#live.delete(key); }

  /** leader.lost from the broker. */
  _lost(ev) {
    const h = this.#live.get(`${ev.workstream}\0${ev.generation}`);
    if (!h) return;
    const e = new FencedError(`leadership of '${ev.workstream}' lost: ${ev.reason}`);
    e.reason = ev.reason;
    h.lose(e);
  }
}

export async function leader(client, workstream, options, fn) {
  if (typeof options === 'function' && fn === undefined) { fn = options; options = {}; }
  options ??= {};
  workstream = str(workstream, 'leader');
  if (typeof fn !== 'function') throw new TypeError('leader: the callback is not a function');
  const { signal, raw = false } = options;
  signal?.throwIfAborted();
  const L = new Leader(client, workstream, raw);
  const fields = { workstream: wireName(workstream) };
  const lease = ms(options.lease, 'lease');
  const timeout = ms(options.timeout, 'timeout');
  if (lease !== undefined) fields.lease_ms = lease;
  if (options.steal) fields.steal = true;
  if (options.ifAvailable) fields.if_available = true;
  if (timeout !== undefined) fields.timeout_ms = timeout;

  const release = client._hold();
  let r, req;
  L.state = LeaderState.REQUESTING;
  try {
    req = await client._request('leader.campaign', fields);
    r = await withSignal(req, signal, (late) => {
      if (late.granted)
        req.conn.call('leader.resign', { workstream: wireName(workstream), generation: late.generation }).catch(() => {});
    });
  } catch (e) {
    L.state = LeaderState.FOLLOWER;
    release();
    throw e;
  }
  release();
  if (!r.granted) {
    L.state = LeaderState.FOLLOWER;
    return fn(null);
  }
  L.generation = client._id(r.generation, 'generation');
  L.leaseMs = r.lease_ms;
  L.state = LeaderState.LEADER;
  const key = `${workstream}\0${L.generation}`;

  return new Promise((resolve, reject) => {
    let settled = false;
    const settle = (f, v) => { if (!settled) { settled = true; f(v); } };
    let renew = null;
    const h = {
      lose: (err) => {
        if (L.state !== LeaderState.LEADER) return;
        L.state = LeaderState.ABORTED;
        if (renew) clearInterval(renew);
        client.leaders._untrack(key);
        client._forget(h);
        L._abort(err);
        settle(reject, err);
      },
    };
    client.leaders._track(key, h);
    client._remember(h);
    const every = Math.max(1, Math.floor((L.leaseMs || lease || 30000) / 3));
    renew = setInterval(() => {
      req.conn.call('leader.renew', { workstream: wireName(workstream), generation: L.generation }).then((x) => {
        if (typeof x.lease_ms === 'number') L.leaseMs = x.lease_ms;
      }, (e) => {
        if (e.code === 'FENCED') {
          const err = new FencedError(`leadership of '${workstream}' lost: renew refused`);
          err.reason = 'fenced';
          h.lose(err);
        }
      });
    }, every);
    renew.unref();
    (async () => {
      let ok = true, value;
      try {
        value = await fn(L);
      } catch (e) {
        ok = false;
        value = e;
      }
      if (L.state !== LeaderState.LEADER) return;
      clearInterval(renew);
      client.leaders._untrack(key);
      try {
        await req.conn.call('leader.resign', { workstream: wireName(workstream), generation: L.generation });
      } catch (e) {
        if (L.state === LeaderState.LEADER) {
          if (e.code === 'FENCED') {
            const err = new FencedError(`leadership of '${workstream}' was lost before the resign`);
            err.reason = 'fenced';
            h.lose(err);
          } else {
            h.lose(e);
          }
        }
        return;
      }
      if (L.state !== LeaderState.LEADER) return;
      L.state = LeaderState.RELEASED;
      client._forget(h);
      settle(ok ? resolve : reject, value);
    })();
  });
}
