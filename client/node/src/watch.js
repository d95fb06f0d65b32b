// watch.js - client.watch(channels[, {signal}]): the broker's lifecycle events
// as an async iterator.
//
//   for await (const ev of client.watch(['-locks', '-flights'])) { ... }
//
// Each event is {channel, what, ..., atMs} (the wire's lifecycle fields in
// camelCase: name, lock, mode, token, conn, pid, reason, key, flight, fence,
// workstream, generation; on -flights also client, instance, startedMs,
// deadlineMs, version, code, retryable, durationMs, waitMs).  The subscriptions are made before the first
// next() resolves; `await it.ready` waits for them explicitly.  The iterator
// ends on return()/break, on the signal, or with an error when the connection
// is lost (events in between cannot be replayed).
import { CoordError } from './errors.js';
import { camel, str } from './util.js';

// Events buffered for a consumer that does not keep up.  Past it the iterator
// fails with LIMIT instead of growing without bound (the broker would
// otherwise be the one to disconnect us for not reading).
export const WATCH_QUEUE_MAX = 10000;

export function watch(client, channels, { signal } = {}) {
  if (typeof channels === 'string') channels = [channels];
  if (!Array.isArray(channels) || channels.length === 0) throw new TypeError('watch: channels must be a non-empty array');
  channels = channels.map((c) => str(c, 'watch'));
  const set = new Set(channels);
  const queue = [];
  let waiter = null;
  let error = null;
  let done = false;

  const finish = () => {
    if (done) return;
    done = true;
    client._removeWatcher(w);
    for (const c of set) client._unsubscribe(c);
    release();
    signal?.removeEventListener('abort', onAbort);
    wake();
  };
  const wake = () => {
    if (!waiter) return;
    const { resolve, reject } = waiter;
    waiter = null;
    if (queue.length) resolve({ value: queue.shift(), done: false });
    else if (error) reject(error);
    else resolve({ value: undefined, done: true });
  };
  const w = {
    _push(m) {
      if (done || !set.has(m.channel)) return;
      if (queue.length >= WATCH_QUEUE_MAX) {
        w._fail(new CoordError('LIMIT', `watch: more than ${WATCH_QUEUE_MAX} events not consumed`));
        return;
      }
      const ev = camel(m);
      delete ev.ev;
      queue.push(ev);
      wake();
    },
    _fail(err) {
      if (done) return;
      error = err;
      queue.length = 0;
      finish();
    },
  };
  const onAbort = () => { error = signal.reason; queue.length = 0; finish(); };
  const release = client._hold();
  client._addWatcher(w);
  const ready = Promise.all(channels.map((c) => client._subscribe(c))).then(() => {});
  ready.catch((e) => w._fail(e));
  if (signal) {
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  }

  return {
    ready,
    async next() {
      if (!done) await ready.catch(() => {});
      if (queue.length) return { value: queue.shift(), done: false };
      if (done) {
        if (error) { const e = error; error = null; throw e; }
        return { value: undefined, done: true };
      }
      return new Promise((resolve, reject) => { waiter = { resolve, reject }; });
    },
    async return() {
      finish();
      return { value: undefined, done: true };
    },
    [Symbol.asyncIterator]() { return this; },
  };
}
