// testlib/fake-broker.js - a scripted stand-in for coordd on a Unix socket,
// for the tests of what a client does with a broker that misbehaves
// (garbage, a huge announced max_frame, an event flood, silence) or with
// frames in an order a real broker makes only by chance (a grant and its
// loss in one read).
//
//   const fb = await fakeBroker(async (peer) => {
//     const hello = await peer.next();           // a decoded request
//     peer.reply(hello, { max_frame: 1 << 20 }); // {rid, ok: true, ...}
//     peer.write(frame(a), frame(b));            // frames in ONE write
//   });
//   connect({ socket: fb.socket, autostart: false }) ... await fb.close();
//
// Each accepted connection runs the handler with a peer: next() resolves the
// next request (null at EOF), reply()/fail() answer one, write() sends raw
// bytes or frames together in one socket write.
import net from 'node:net';
import path from 'node:path';
import { Encoder, Decoder } from '@msgpack/msgpack';
import { tempDir } from './broker.js';

const enc = new Encoder({ ignoreUndefined: true });
const dec = new Decoder();

/** A frame (length prefix + MessagePack map) as bytes. */
export function frame(map) {
  return rawFrame(enc.encode(map));
}

/** A frame around body bytes given as they are. */
export function rawFrame(body) {
  const b = Buffer.allocUnsafe(4 + body.length);
  b.writeUInt32BE(body.length, 0);
  Buffer.from(body.buffer, body.byteOffset, body.length).copy(b, 4);
  return b;
}

/** The hello reply a real broker would give (fields overridable). */
export function helloReply(req, extra = {}) {
  return { rid: req.rid, ok: true, proto: 1, broker: 'fake 0', conn: 1, epoch: 1, max_frame: 1 << 20, ...extra };
}

class Peer {
  constructor(sock) {
    this.sock = sock;
    this.buf = Buffer.alloc(0);
    this.queue = [];
    this.waiters = [];
    this.ended = false;
    sock.on('data', (d) => {
      this.buf = Buffer.concat([this.buf, d]);
      while (this.buf.length >= 4) {
        const n = this.buf.readUInt32BE(0);
        if (this.buf.length < 4 + n) break;
        const m = dec.decode(this.buf.subarray(4, 4 + n));
        this.buf = this.buf.subarray(4 + n);
        this.#push(m);
      }
    });
    sock.on('close', () => { this.ended = true; this.#push(null); });
    sock.on('error', () => {});
  }

  #push(m) {
    const w = this.waiters.shift();
    if (w) w(m); else this.queue.push(m);
  }

  /** The next request (decoded), or null once the client has closed. */
  next() {
    if (this.queue.length) return Promise.resolve(this.queue.shift());
    if (this.ended) return Promise.resolve(null);
    return new Promise((r) => this.waiters.push(r));
  }

  /** The next request whose op is op (others are answered ok: {}). */
  async expect(op) {
    for (;;) {
      const m = await this.next();
      if (!m || m.op === op) return m;
      this.reply(m);
    }
  }

  /** Writes frames (maps) or raw byte chunks, all in one write. */
  write(...parts) {
    const bufs = parts.map((p) => (Buffer.isBuffer(p) || p instanceof Uint8Array ? Buffer.from(p) : frame(p)));
    return new Promise((r) => this.sock.write(Buffer.concat(bufs), () => r()));
  }

  reply(req, fields = {}) { return this.write({ rid: req.rid, ok: true, ...fields }); }

  fail(req, code, message) { return this.write({ rid: req.rid, ok: false, code, message }); }

  /** Says hello as a broker would; resolves the hello request. */
  async hello(extra) {
    const h = await this.next();
    await this.write(helloReply(h, extra));
    return h;
  }

  end() { this.sock.end(); }
}

/** Listens on a fresh socket; handler(peer) runs for each connection. */
export async function fakeBroker(handler) {
  const dir = tempDir('coord-fake-');
  const socket = path.join(dir, 'fake.sock');
  const peers = [];
  const errors = [];
  const server = net.createServer((sock) => {
    const peer = new Peer(sock);
    peers.push(peer);
    Promise.resolve().then(() => handler(peer)).catch((e) => errors.push(e));
  });
  await new Promise((r) => server.listen(socket, r));
  return {
    socket, dir, peers, errors,
    close() {
      for (const p of peers) p.sock.destroy();
      return new Promise((r) => server.close(() => r()));
    },
  };
}
