// channel.js - new client.BroadcastChannel(name): the browser's BroadcastChannel
// across processes, over coord's channels (sub.subscribe / sub.publish).
//
// As in the browser, a message reaches every other open channel object of the
// same name (in the client's scope), those of this process included, never
// the object that posted it.  The broker does not echo a publish to the
// publishing connection, so the client delivers to its own other objects of
// that name itself.  Each receiver decodes its own copy (structured-clone
// semantics).  Values travel as MessagePack (anything msgpack can carry:
// null, booleans, numbers, strings, Uint8Array, arrays, plain objects, Date);
// one message is at most 64 KiB encoded (the broker's limit).
//
// Delivery is asynchronous (a later task), in order per sender.  A channel
// object starts receiving once its subscription reached the broker: await
// `channel.ready` when a message sent by another process right after
// construction must not be missed.  An open channel keeps the process alive
// (like Node's own); channel.unref() lets the process exit anyway.
import { CoordError } from './errors.js';
import { valueDecoder, valueEncoder, wireName } from './wire.js';
import { str } from './util.js';

// The broker's limit on sub.publish data (protocol: data <= 64 KiB).
export const MAX_MESSAGE_BYTES = 64 * 1024;

export function makeBroadcastChannel(client) {
  class BroadcastChannel extends EventTarget {
    #name;
    #closed = false;
    #onmessage = null;
    #onmessageerror = null;
    #release;
    #ready;

    constructor(name) {
      super();
      if (arguments.length < 1) throw new TypeError("BroadcastChannel: 1 argument required, but only 0 present.");
      this.#name = str(name, 'BroadcastChannel');
      this.#release = client._hold();
      client._addChannel(this.#name, this);
      this.#ready = client.closed ? Promise.reject(new CoordError('CLOSED', 'the client is closed'))
        : client._subscribe(this.#name);
      this.#ready.catch(() => {});
    }

    get name() { return this.#name; }

    /** Resolves once this object's subscription is at the broker. */
    get ready() { return this.#ready; }

    get onmessage() { return this.#onmessage; }
    set onmessage(f) { this.#setHandler('message', f, this.#onmessage, (v) => { this.#onmessage = v; }); }
    get onmessageerror() { return this.#onmessageerror; }
    set onmessageerror(f) { this.#setHandler('messageerror', f, this.#onmessageerror, (v) => { this.#onmessageerror = v; }); }

    #setHandler(type, f, old, set) {
      if (old) this.removeEventListener(type, old);
      const fn = typeof f === 'function' ? f : null;
      set(fn);
      if (fn) this.addEventListener(type, fn);
    }

    postMessage(message) {
      if (arguments.length < 1) throw new TypeError("BroadcastChannel.postMessage: 1 argument required, but only 0 present.");
      if (this.#closed) throw new DOMException('BroadcastChannel is closed.', 'InvalidStateError');
      let data;
      try {
        data = valueEncoder.encode(message);
      } catch (e) {
        throw new DOMException(`BroadcastChannel.postMessage: the value cannot be encoded: ${e.message}`, 'DataCloneError');
      }
      if (data.length > MAX_MESSAGE_BYTES)
        throw new CoordError('TOO_LARGE', `a message is at most ${MAX_MESSAGE_BYTES} bytes encoded, not ${data.length}`);
      for (const peer of client._localPeers(this.#name))
        if (peer !== this) peer._deliver(data);
      client._call('sub.publish', { channel: wireName(this.#name), data }).catch(() => {});
    }

    close() {
      if (this.#closed) return;
      this._detach();
      client._unsubscribe(this.#name);
    }

    /** Keeps the process alive while open (the default). */
    ref() {
      if (!this.#closed && !this.#release) this.#release = client._hold();
      return this;
    }

    /** Lets the process exit while this channel is open. */
    unref() {
      this.#release?.();
      this.#release = null;
      return this;
    }

    _detach() {
      if (this.#closed) return;
      this.#closed = true;
      client._removeChannel(this.#name, this);
      this.#release?.();
      this.#release = null;
    }

    _deliver(bytes) {
      setImmediate(() => {
        if (this.#closed) return;
        let value;
        try {
          value = valueDecoder.decode(bytes);
        } catch {
          this.dispatchEvent(new MessageEvent('messageerror', { data: null }));
          return;
        }
        this.dispatchEvent(new MessageEvent('message', { data: value }));
      });
    }

    get [Symbol.toStringTag]() { return 'BroadcastChannel'; }
  }
  return BroadcastChannel;
}
