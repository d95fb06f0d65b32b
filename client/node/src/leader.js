// leader.js - leadership: client.leader(workstream[, options], async (leader) => ...)
// and the manager calls of client.leaders (define, describe, info, history,
// check, pending, drain, disable, enable, read).
//
// leader() campaigns (leader.campaign: options lease, protocol, steal,
// incident, ifAvailable, timeout, signal), then runs the callback as leader
// with a Leader: {workstream, generation, leaseMs, mode, state, drainReason,
// signal, commit, claim, abandon, pending, drain, read}, an EventTarget that
// fires 'drain' and 'mode'.  The lease is renewed every lease/3 while the
// callback runs (draining included); when the callback settles the client
// resigns and leader() settles with the callback's result (after the
// resign's reply).  ifAvailable not granted: the callback gets null, as Web
// Locks' request does.
//
// States (LeaderState, the protocol's names): FOLLOWER (not leading: before
// the campaign, or ifAvailable refused), REQUESTING (campaigning), LEADER,
// DRAINING (finishing: leader.drain() called, or the broker asked with a
// leader.drain event), RELEASED (the term is over: resigned, lost or fenced),
// ABORTED (the campaign was cancelled or failed while it waited).
//
// Leadership lost (lease expired, stolen, incident steal, disabled, max hold,
// connection gone): state becomes RELEASED, leader.signal aborts with a
// FencedError (.reason is the broker's: expired, stolen, incident, disabled,
// max_hold, fenced, or the connection's error; .incident with an incident
// steal), and leader() rejects at once with that error; the callback's later
// result is ignored and its commits get FENCED.  This is the Web Locks rule
// for a stolen lock, applied to leadership.
//
// Draining: a 'drain' event (CustomEvent, detail {reason: 'max_hold' |
// 'requested'}; also leader.ondrain) tells the callback to finish.  With
// options.drainGrace (ms), leader.signal also aborts that long after the
// event (reason: a DrainingError, .reason the drain's) while the callback
// still runs; it still leads until it returns (then resigns) or is fenced (a
// max-hold drain is fenced by the broker one lease after the event).
// Events that arrive with the grant are delivered once the callback's
// synchronous part has run, so listeners it adds at once see them.
//
// Values of commit/read are MessagePack-encoded by default; with
// options.raw they are Uint8Array as is (what other languages see).
import { DrainingError, FencedError, NotFoundError } from './errors.js';
import { runLeaderFallback } from './descfile.js';
import { packValue, unpackValue, wireName } from './wire.js';
import { camel, ms, str, withSignal } from './util.js';

export const LeaderState = Object.freeze({
  FOLLOWER: 'FOLLOWER', REQUESTING: 'REQUESTING', LEADER: 'LEADER', DRAINING: 'DRAINING',
  RELEASED: 'RELEASED', ABORTED: 'ABORTED',
});

// The broker's leadership lease when a campaign names none (ms), renewed
// every lease/3: a frozen or stalled leader is replaced within it (under
// 2 s), and one stalled longer loses its term (its late commits are
// FENCED).  Pass options.lease for a term that must survive longer stalls.
export const DEFAULT_LEASE_MS = 1500;

const leading = (s) => s === LeaderState.LEADER || s === LeaderState.DRAINING;

// A string option: undefined stays undefined, else it must be a string.
function optStr(v, what) {
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw new TypeError(`${what} must be a string`);
  return v;
}

export class Leader extends EventTarget {
  #client; #raw; #ac = new AbortController();
  #ondrain = null; #onmode = null;

  constructor(client, workstream, raw) {
    super();
    this.#client = client;
    this.#raw = raw;
    this.workstream = workstream;
    this.generation = 0;
    this.leaseMs = 0;
    this.mode = null;
    this.state = LeaderState.FOLLOWER;
    this.drainReason = null;      // 'self' | 'requested' | 'max_hold' while draining
  }

  /** Aborted when the leadership is lost, or a drain's grace has passed. */
  get signal() { return this.#ac.signal; }

  get ondrain() { return this.#ondrain; }
  set ondrain(f) { this.#ondrain = this.#handler('drain', f, this.#ondrain); }
  get onmode() { return this.#onmode; }
  set onmode(f) { this.#onmode = this.#handler('mode', f, this.#onmode); }

  #handler(type, f, old) {
    if (old) this.removeEventListener(type, old);
    const fn = typeof f === 'function' ? f : null;
    if (fn) this.addEventListener(type, fn);
    return fn;
  }

  _abort(err) { if (!this.#ac.signal.aborted) this.#ac.abort(err); }

  #fields(extra) {
    return { workstream: wireName(this.workstream), generation: this.generation, ...extra };
  }

  /**
   * Applies key = value if this generation is still the live one, at most once
   * per opId (without key: records only that the op's effect happened):
   * {applied: true} | {applied: false, duplicate: true, generation} |
   * {applied: false, abandoned: true}.  FencedError when the leadership is
   * gone, ReadOnlyError in modes shadow and read-only.
   */
  async commit(opId, key, value) {
    const f = this.#fields({ op_id: wireName(str(opId, 'commit: opId')) });
    if (key !== undefined) {
      f.key = wireName(str(key, 'commit: key'));
      f.value = packValue(value, this.#raw, 'commit: value');
    } else if (value !== undefined) {
      throw new TypeError('commit: a value needs a key');
    }
    const r = await this.#client._call('leader.commit', f);
    const o = { applied: !!r.applied };
    if (r.duplicate) { o.duplicate = true; o.generation = this.#client._id(r.generation, 'generation'); }
    if (r.abandoned) o.abandoned = true;
    return o;
  }

  /**
   * Claims opId for this generation before doing its external effect:
   * {claimed, reconcile, applied, abandoned} (booleans), with
   * previousGeneration and claimedMs when reconcile (an earlier generation
   * claimed it and never settled it: reconcile by this op id first), and
   * generation when applied.  DrainingError while draining.
   */
  async claim(opId) {
    const r = await this.#client._call('leader.claim', this.#fields({ op_id: wireName(str(opId, 'claim: opId')) }));
    const o = { claimed: !!r.claimed, reconcile: !!r.reconcile, applied: !!r.applied, abandoned: !!r.abandoned };
    if (r.reconcile) {
      o.previousGeneration = this.#client._id(r.previous_generation, 'previous_generation');
      o.claimedMs = r.claimed_ms;
    }
    if (r.applied) o.generation = this.#client._id(r.generation, 'generation');
    return o;
  }

  /** Settles opId as never to be done: {abandoned: true} | {abandoned: false,
   * applied: true, generation} (it was applied already). */
  async abandon(opId, reason) {
    const r = await this.#client._call('leader.abandon', this.#fields({
      op_id: wireName(str(opId, 'abandon: opId')), reason: str(reason, 'abandon: reason'),
    }));
    if (r.applied) return { abandoned: false, applied: true, generation: this.#client._id(r.generation, 'generation') };
    return { abandoned: true, applied: false };
  }

  /** The workstream's claimed, unsettled ops (see Leaders.pending). */
  pending(options) { return this.#client.leaders.pending(this.workstream, options); }

  /** Announces that this leader is finishing: new claims get DrainingError,
   * commits and abandons still work; state DRAINING until the callback ends. */
  async drain() {
    await this.#client._call('leader.drain', this.#fields());
    if (this.state === LeaderState.LEADER) {
      this.state = LeaderState.DRAINING;
      this.drainReason = 'self';
    }
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

// leader.define's options: JS name -> [wire name, kind].
const DEFINE_FIELDS = {
  protocol: ['protocol', 'string'], maxHold: ['max_hold_ms', 'ms'], steal: ['steal', 'string'],
  mode: ['mode', 'string'], fallback: ['fallback', 'string'], canonicalFence: ['canonical_fence', 'string'],
  lockName: ['lock_name', 'string'], capabilities: ['capabilities', 'capabilities'],
  ifAvailable: ['if_available', 'string'], force: ['force', 'boolean'],
};

/** A reply without rid and ok, keys camelCased. */
function body(r) {
  const o = { ...r };
  delete o.rid; delete o.ok;
  return camel(o);
}

export class Leaders {
  #client;
  #live = new Map();        // workstream \0 generation -> holder

  constructor(client) { this.#client = client; }

  #ws(workstream, what) { return wireName(str(workstream, what)); }

  /** leader.info: {generation, state, mode, disabled, maxHoldMs, ...} in camelCase. */
  async info(workstream) {
    return body(await this.#client._call('leader.info', { workstream: this.#ws(workstream, 'leaders.info') }));
  }

  /**
   * leader.define: changes the stored descriptor field by field and resolves
   * it (camelCase: {workstream, protocol, pinnedProtocol, maxHoldMs, steal,
   * mode, fallback, canonicalFence, definedMs}).  A field left out (or
   * undefined) keeps its stored value; null returns it to its default.
   */
  async define(workstream, descriptor = {}) {
    if (descriptor === null || typeof descriptor !== 'object')
      throw new TypeError('leaders.define: the descriptor must be an object');
    const f = { workstream: this.#ws(workstream, 'leaders.define') };
    for (const [k, v] of Object.entries(descriptor)) {
      const spec = DEFINE_FIELDS[k];
      if (!spec) throw new TypeError(`leaders.define: unknown field ${k} (known: ${Object.keys(DEFINE_FIELDS).join(', ')})`);
      if (v === undefined) continue;
      const [wire, kind] = spec;
      if (v === null) f[wire] = null;
      else if (kind === 'ms') f[wire] = ms(v, `leaders.define: ${k}`);
      else if (kind === 'capabilities') {
        if (Array.isArray(v) && v.every((x) => typeof x === 'string')) f[wire] = v.join(',');
        else f[wire] = optStr(v, `leaders.define: ${k}`);
      } else if (kind === 'boolean') {
        if (typeof v !== 'boolean') throw new TypeError(`leaders.define: ${k} must be a boolean`);
        f[wire] = v;
      } else f[wire] = optStr(v, `leaders.define: ${k}`);
    }
    const r = await this.#client._call('leader.define', f);
    return camel(r.descriptor);
  }

  /** leader.describe: the stored descriptor (as define resolves it), or null
   * when the workstream was never defined (it then has the defaults). */
  async describe(workstream) {
    try {
      const r = await this.#client._call('leader.describe', { workstream: this.#ws(workstream, 'leaders.describe') });
      return camel(r.descriptor);
    } catch (e) {
      if (e instanceof NotFoundError) return null;
      throw e;
    }
  }

  /** leader.history: the last terms, newest first: [{generation, client, pid,
   * instance, protocol?, mode, electedMs, endedMs, reason?, incident?}]
   * (.truncated when cut to fit a frame). */
  async history(workstream, { limit } = {}) {
    const f = { workstream: this.#ws(workstream, 'leaders.history') };
    const l = ms(limit, 'limit');
    if (l !== undefined) f.limit = l;
    const r = await this.#client._call('leader.history', f);
    const out = (r.terms || []).map(camel);
    if (r.truncated) out.truncated = true;
    return out;
  }

  /** leader.pending: claimed, unsettled ops, oldest claim first:
   * [{opId, generation, claimedMs, live}] (.truncated when cut). */
  async pending(workstream, { limit } = {}) {
    const f = { workstream: this.#ws(workstream, 'leaders.pending') };
    const l = ms(limit, 'limit');
    if (l !== undefined) f.limit = l;
    const r = await this.#client._call('leader.pending', f);
    const out = (r.ops || []).map(camel);
    if (r.truncated) out.truncated = true;
    return out;
  }

  /**
   * leader.check: whether generation is the live one: {live: true,
   * leaseLeftMs, mode}, or {live: false} when it is fenced.  A check, not a
   * lock: the answer can be stale by the time it arrives.
   */
  async check(workstream, generation) {
    try {
      const r = await this.#client._call('leader.check', {
        workstream: this.#ws(workstream, 'leaders.check'), generation: checkGeneration(generation),
      });
      return { live: !!r.live, leaseLeftMs: r.lease_left_ms, mode: r.mode };
    } catch (e) {
      if (e instanceof FencedError) return { live: false };
      throw e;
    }
  }

  /** Asks the leader of generation to drain (it gets a 'drain' event with
   * reason 'requested'); FencedError when that generation no longer leads. */
  async drain(workstream, generation) {
    await this.#client._call('leader.drain', {
      workstream: this.#ws(workstream, 'leaders.drain'), generation: checkGeneration(generation),
    });
  }

  /** The incident kill switch: fences the leader, refuses campaigns (except
   * incident campaigns); resolves {generation}. */
  async disable(workstream) {
    const r = await this.#client._call('leader.disable', { workstream: this.#ws(workstream, 'leaders.disable') });
    return { generation: r.generation };
  }

  async enable(workstream) {
    await this.#client._call('leader.enable', { workstream: this.#ws(workstream, 'leaders.enable') });
  }

  /** Reads a committed value without leading. */
  read(workstream, key, { raw = false } = {}) {
    return readKey(this.#client, str(workstream, 'leaders.read'), key, raw);
  }

  _track(key, h) { this.#live.set(key, h); }
  _untrack(key, h) { if (this.#live.get(key) === h) this.#live.delete(key); }

  #holder(ev) { return this.#live.get(`${ev.workstream}\0${ev.generation}`); }

  /** leader.lost from the broker. */
  _lost(ev) {
    const h = this.#holder(ev);
    if (!h) return;
    const e = new FencedError(`leadership of '${ev.workstream}' lost: ${ev.reason}`
      + (typeof ev.incident === 'string' ? ` (incident: ${ev.incident})` : ''));
    e.reason = ev.reason;
    if (typeof ev.incident === 'string') e.incident = ev.incident;
    h.event(() => h.lose(e));
  }

  /** leader.drain from the broker (max_hold, requested). */
  _drain(ev) { const h = this.#holder(ev); if (h) h.event(() => h.drain(ev.reason)); }

  /** leader.mode from the broker. */
  _mode(ev) { const h = this.#holder(ev); if (h) h.event(() => h.mode(ev.mode)); }
}

function checkGeneration(g) {
  if (!Number.isSafeInteger(g) || g < 0) throw new TypeError('generation must be a non-negative safe integer');
  return g;
}

function campaignFields(workstream, options) {
  const fields = { workstream: wireName(workstream) };
  const lease = ms(options.lease, 'lease');
  const timeout = ms(options.timeout, 'timeout');
  const protocol = optStr(options.protocol ?? undefined, 'protocol');
  const incident = optStr(options.incident ?? undefined, 'incident');
  const capabilities = options.capabilities;
  if (capabilities !== undefined && capabilities !== null) {
    const list = typeof capabilities === 'string' ? capabilities : Array.isArray(capabilities) ? capabilities.join(',') : undefined;
    if (list === undefined || (Array.isArray(capabilities) && !capabilities.every((x) => typeof x === 'string')))
      throw new TypeError('capabilities must be an array of strings (or "a,b")');
    fields.capabilities = list;
  }
  if (lease !== undefined) fields.lease_ms = lease;
  if (options.steal) fields.steal = true;
  if (options.ifAvailable) fields.if_available = true;
  if (timeout !== undefined) fields.timeout_ms = timeout;
  if (protocol !== undefined) fields.protocol = protocol;
  if (incident !== undefined) fields.incident = incident;
  return fields;
}

export async function leader(client, workstream, options, fn) {
  if (typeof options === 'function' && fn === undefined) { fn = options; options = {}; }
  options ??= {};
  workstream = str(workstream, 'leader');
  if (typeof fn !== 'function') throw new TypeError('leader: the callback is not a function');
  const { signal, raw = false } = options;
  if (options.fallback !== undefined && typeof options.fallback !== 'boolean')
    throw new TypeError('leader: fallback must be a boolean');
  const drainGrace = ms(options.drainGrace, 'drainGrace');
  const fields = campaignFields(workstream, options);
  signal?.throwIfAborted();
  const L = new Leader(client, workstream, raw);

  // The holder: what leader.lost / drain / mode events reach.  It is tracked
  // from the moment the grant is read (onReply), so that events right behind
  // the grant are not missed; until the callback has started they queue.
  let queue = [];
  let key = null;
  const h = {
    event: (f) => { if (queue) queue.push(f); else f(); },
    lose: () => {}, drain: () => {}, mode: () => {},
  };
  const onReply = (r) => {
    if (!r.granted || !Number.isSafeInteger(r.generation)) return;
    key = `${workstream}\0${r.generation}`;
    client.leaders._track(key, h);
  };

  const release = client._hold();
  let r, req;
  L.state = LeaderState.REQUESTING;
  try {
    req = await client._request('leader.campaign', fields, { onReply, signal });
    r = await withSignal(req, signal, (late) => {
      if (key) client.leaders._untrack(key, h);
      if (late.granted)
        req.conn.call('leader.resign', { workstream: wireName(workstream), generation: late.generation }).catch(() => {});
    });
  } catch (e) {
    if (key) client.leaders._untrack(key, h);
    L.state = LeaderState.ABORTED;
    release();
    // no broker: with options.fallback, the workstream's descriptor file decides
    if (options.fallback && !client._closedByUser && (e?.code === 'CONNECT' || e?.code === 'CLOSED'))
      return runLeaderFallback(workstream, { ...options, scope: client.scope }, fn, e);
    throw e;
  }
  release();
  if (!r.granted) {
    L.state = LeaderState.FOLLOWER;
    return fn(null);
  }
  try {
    L.generation = client._id(r.generation, 'generation');
  } catch (e) {
    L.state = LeaderState.ABORTED;
    throw e;
  }
  L.leaseMs = r.lease_ms;
  L.mode = typeof r.mode === 'string' ? r.mode : 'active';
  L.state = LeaderState.LEADER;
  const resignFields = { workstream: wireName(workstream), generation: L.generation };

  return new Promise((resolve, reject) => {
    let settled = false;
    const settle = (f, v) => { if (!settled) { settled = true; f(v); } };
    let renew = null, grace = null;
    const stop = () => {
      if (renew) clearInterval(renew);
      if (grace) clearTimeout(grace);
      client.leaders._untrack(key, h);
    };
    h.lose = (err) => {
      if (!leading(L.state)) return;
      L.state = LeaderState.RELEASED;
      stop();
      client._forget(h);
      L._abort(err);
      settle(reject, err);
    };
    h.drain = (reason) => {
      if (!leading(L.state)) return;
      L.state = LeaderState.DRAINING;
      L.drainReason = reason;
      if (drainGrace !== undefined && !grace) {
        grace = setTimeout(() => {
          if (!leading(L.state)) return;
          const err = new DrainingError(`leadership of '${workstream}' is draining (${reason}): its grace of ${drainGrace} ms has passed`);
          err.reason = reason;
          L._abort(err);
        }, drainGrace);
        grace.unref();
      }
      L.dispatchEvent(new CustomEvent('drain', { detail: { reason } }));
    };
    h.mode = (mode) => {
      if (!leading(L.state) || L.mode === mode) return;
      L.mode = mode;
      L.dispatchEvent(new CustomEvent('mode', { detail: { mode } }));
    };
    client._remember(h);
    const every = Math.max(1, Math.floor((L.leaseMs || DEFAULT_LEASE_MS) / 3));
    renew = setInterval(() => {
      req.conn.call('leader.renew', resignFields).then((x) => {
        if (typeof x.lease_ms === 'number') L.leaseMs = x.lease_ms;
      }, (e) => {
        if (e.code === 'FENCED') {
          const err = new FencedError(`leadership of '${workstream}' lost: renew refused`);
          err.reason = 'fenced';
          h.event(() => h.lose(err));
        }
      });
    }, every);
    renew.unref();

    // runs fn's synchronous part now (listeners it adds see the queued events)
    const run = (async () => fn(L))();
    const q = queue;
    queue = null;
    for (const f of q) f();
    (async () => {
      let ok = true, value;
      try {
        value = await run;
      } catch (e) {
        ok = false;
        value = e;
      }
      if (!leading(L.state)) return;
      stop();
      try {
        await req.conn.call('leader.resign', resignFields);
      } catch (e) {
        if (leading(L.state)) {
          let err = e;
          if (e.code === 'FENCED') {
            err = new FencedError(`leadership of '${workstream}' was lost before the resign`);
            err.reason = 'fenced';
          }
          h.lose(err);
        }
        return;
      }
      if (!leading(L.state)) return;
      L.state = LeaderState.RELEASED;
      client._forget(h);
      settle(ok ? resolve : reject, value);
    })();
  });
}

