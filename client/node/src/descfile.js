// descfile.js - workstream descriptor files (crossTabLeader.v1) and the
// fallback they name for when no broker can be reached.
//
// The format (protocol/PROTOCOL.md, "Descriptor files"): `key: value` lines,
// `#` comments, blank lines, values plain or quoted ('...' with '' for a
// quote, "..." with \" and \\); an empty value, `~` or `null` is nil.  Any
// other key, a key twice, an indented line or a bad value refuses the whole
// file, each error with its line (0: the whole file).  This reader follows
// the broker's (protocol/desc-file.c) rule for rule: tests/vectors/
// desc-files.json is run through both.
//
// The fallback (PROTOCOL.md, "Fallback when the broker cannot be reached"):
// CONFIG_DIR/workstreams/WORKSTREAM.v1 (CONFIG_DIR: options.configDir, else
// $COORD_CONFIG_DIR, else $XDG_CONFIG_HOME/coord, else ~/.config/coord)
// says what a client does without a broker: READ_ONLY and
// SERVER_COORDINATED run read-only with no generation; SINGLE_INSTANCE runs
// alone only in the instance the user started so (options.singleInstance);
// FAIL_CLOSED, no fallback, no file, a bad file or a file of another origin
// than the client's scope: no leader, no work (the error stands).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ConnectError, CoordError, ReadOnlyError } from './errors.js';

export const DESC_SCHEMA = 'crossTabLeader.v1';
const FILE_MAX = 64 * 1024;
const KEYS = ['schema', 'workstream', 'origin', 'protocol', 'maxHold', 'steal', 'fallback',
  'canonicalFence', 'mode', 'disabled', 'lockName', 'capabilities', 'ifAvailable'];
const FALLBACKS = {
  FAIL_CLOSED: 'fail-closed', READ_ONLY: 'read-only', SERVER_COORDINATED: 'read-only',
  SINGLE_INSTANCE: 'single-instance',
};
const CAPS_MAX = 16;
const CAP_LEN = 64;

const isSpace = (c) => c === ' ' || c === '\t';

// A value shown in an error: printable ASCII, other characters as '?', cut at 64.
function shown(s) {
  let out = '';
  for (const ch of s.slice(0, 64)) {
    const c = ch.codePointAt(0);
    out += c >= 0x20 && c < 0x7f ? ch : '?';
  }
  return s.length > 64 ? `${out}...` : out;
}

/** The action of a fallback name, or undefined for an unknown one. */
export function fallbackAction(name) {
  return Object.hasOwn(FALLBACKS, name) ? FALLBACKS[name] : undefined;
}

/** "30s", "500ms", "2m", "1h", "1.5s", a bare number is seconds: ms, or undefined. */
export function parseDuration(s) {
  const m = /^([0-9]*)(\.[0-9]*)?(.*)$/s.exec(s);
  if (!m || (m[1] + (m[2] || '')).replace('.', '') === '') return undefined;
  const units = { ms: 1, s: 1000, m: 60000, h: 3600000, '': 1000 };
  if (!Object.hasOwn(units, m[3])) return undefined;
  const v = Number(m[1] + (m[2] || ''));
  if (!(v >= 0)) return undefined;
  const r = v * units[m[3]];
  if (r > 1099511627776) return undefined;
  let out = Math.floor(r + 0.5);
  if (out === 0 && v > 0) out = 1;
  return out;
}

/** A capability list ("a, b", "[a, b]", "a,b") as "a,b"; throws Error with
 * what is wrong. */
export function normalizeCapabilities(s) {
  let t = s.replace(/^[ \t]+|[ \t]+$/g, '');
  if (t.startsWith('[')) {
    if (!t.endsWith(']') || t.length < 2) throw new Error('a list in [ ] lacks its closing ]');
    t = t.slice(1, -1);
  }
  if (t.replace(/[ \t]/g, '') === '') return '';
  t = t.replace(/^[ \t]+/, '');
  const names = [];
  const pieces = t.split(',');
  if (pieces.length > 1 && pieces[pieces.length - 1] === '') pieces.pop();   // "a," as C reads it
  for (const piece of pieces) {
    const name = piece.replace(/^[ \t]+|[ \t]+$/g, '');
    if (!name) throw new Error('an empty capability name');
    if (Buffer.byteLength(name) > CAP_LEN) throw new Error('a capability name is longer than 64 bytes');
    if (!/^[A-Za-z0-9._\-:/@+]+$/.test(name)) throw new Error('capability names are A-Z a-z 0-9 . _ - : / @ +');
    if (names.length + 1 > CAPS_MAX) throw new Error('more than 16 capabilities');
    if (names.includes(name)) throw new Error('a capability is named twice');
    names.push(name);
  }
  const out = names.join(',');
  if (Buffer.byteLength(out) > 255) throw new Error('too many capabilities');
  return out;
}

// The value after "key:" (quotes removed, comment cut): string, or null for
// nil; throws Error(reason) when malformed.
function fileValue(v) {
  let i = 0;
  while (i < v.length && isSpace(v[i])) i++;
  v = v.slice(i);
  if (v[0] === '"' || v[0] === "'") {
    const q = v[0];
    let out = '';
    let p = 1;
    for (;; p++) {
      if (p >= v.length) throw new Error('unterminated quote');
      if (q === "'" && v[p] === "'" && v[p + 1] === "'") { out += "'"; p++; }
      else if (v[p] === q) break;
      else if (q === '"' && v[p] === '\\') {
        if (v[p + 1] !== '"' && v[p + 1] !== '\\') throw new Error('only \\" and \\\\ may be escaped');
        out += v[++p];
      } else out += v[p];
    }
    let rest = v.slice(p + 1);
    rest = rest.replace(/^[ \t]+/, '');
    if (rest && rest[0] !== '#') throw new Error('text after the closing quote');
    return out;
  }
  let end = 0;
  for (let p = 0; p < v.length; p++) {
    if (v[p] === '#' && (p === 0 || isSpace(v[p - 1]))) break;
    end = p + 1;
  }
  while (end > 0 && isSpace(v[end - 1])) end--;
  const s = v.slice(0, end);
  return s === '' || s === '~' || s === 'null' ? null : s;
}

/**
 * Parses a descriptor file's bytes (Buffer or string): {values: {key: value
 * | null} of the keys given, maxHoldMs, capabilities ("a,b"), disabled,
 * errors: [{line, message}]} (line 0: the whole file).
 */
export function parseDescriptor(data) {
  const buf = typeof data === 'string' ? Buffer.from(data) : data;
  const d = { values: {}, maxHoldMs: undefined, capabilities: undefined, disabled: undefined, errors: [] };
  if (buf.length > FILE_MAX) { d.errors.push({ line: 0, message: 'larger than 64 KiB' }); return d; }
  if (buf.includes(0)) { d.errors.push({ line: 0, message: 'not a text file (NUL byte)' }); return d; }
  const lines = buf.toString('utf8').split('\n');
  lines.forEach((raw, idx) => {
    const lineno = idx + 1;
    const err = (message) => d.errors.push({ line: lineno, message });
    let line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    let p = 0;
    while (p < line.length && isSpace(line[p])) p++;
    if (p === line.length || line[p] === '#') return;
    if (p !== 0) { err(`indented line (nested values are not part of ${DESC_SCHEMA})`); return; }
    const colon = line.indexOf(':');
    if (colon < 0) { err('expected "key: value"'); return; }
    const key = line.slice(0, colon).replace(/[ \t]+$/, '');
    if (!KEYS.includes(key)) { err(`unknown key '${shown(key)}'`); return; }
    if (Object.hasOwn(d.values, key)) { err(`key '${key}' given twice`); return; }
    d.values[key] = undefined;
    let v;
    try {
      v = fileValue(line.slice(colon + 1));
    } catch (e) {
      err(`${key}: ${e.message}`);
      return;
    }
    d.values[key] = v;
    switch (key) {
      case 'schema':
        if (v !== DESC_SCHEMA) err(`schema must be ${DESC_SCHEMA}, not ${v === null ? 'empty' : shown(v)}`);
        break;
      case 'workstream':
        if (v === null) err('workstream: empty');
        break;
      case 'maxHold':
        if (v !== null) {
          const ms = parseDuration(v);
          if (ms === undefined) err(`maxHold: not a duration (like 30s, 500ms, 2m): ${shown(v)}`);
          else d.maxHoldMs = ms;
        }
        break;
      case 'fallback':
        if (v !== null && fallbackAction(v) === undefined)
          err(`fallback must be FAIL_CLOSED, READ_ONLY, SERVER_COORDINATED or SINGLE_INSTANCE, not ${shown(v)}`);
        break;
      case 'capabilities':
        if (v !== null) {
          try { d.capabilities = normalizeCapabilities(v); } catch (e) { err(`capabilities: ${e.message}`); }
        }
        break;
      case 'lockName':
        if (v !== null && (v[0] === '-' || Buffer.byteLength(v) > 200))
          err("lockName must be 1..200 bytes, not starting with '-' (the broker's names)");
        break;
      case 'ifAvailable':
        if (v !== null && v !== 'allowed' && v !== 'never') err(`ifAvailable must be allowed or never, not ${shown(v)}`);
        break;
      case 'disabled':
        if (v === 'true') d.disabled = true;
        else if (v === 'false') d.disabled = false;
        else err(`disabled must be true or false, not ${v === null ? 'empty' : shown(v)}`);
        break;
      default:
        break;
    }
  });
  if (!Object.hasOwn(d.values, 'schema')) d.errors.push({ line: 0, message: `no schema (schema: ${DESC_SCHEMA})` });
  return d;
}

/** The config dir: $COORD_CONFIG_DIR, else $XDG_CONFIG_HOME/coord, else ~/.config/coord. */
export function defaultConfigDir() {
  if (process.env.COORD_CONFIG_DIR) return process.env.COORD_CONFIG_DIR;
  if (process.env.XDG_CONFIG_HOME) return path.join(process.env.XDG_CONFIG_HOME, 'coord');
  return path.join(process.env.HOME || os.homedir(), '.config', 'coord');
}

/**
 * What to do without a broker, from workstream's descriptor file:
 * {action: 'fail-closed' | 'read-only' | 'single-instance', fallback (the
 * file's name for it, or undefined), path, reason}.  Never throws for a
 * missing or bad file: that is 'fail-closed', with the reason.
 */
export function readLeaderFallback(workstream, { configDir, scope } = {}) {
  const out = { action: 'fail-closed', fallback: undefined, path: undefined, reason: '' };
  if (typeof workstream !== 'string' || workstream === '' || Buffer.byteLength(workstream) > 200 ||
      workstream.startsWith('.') || workstream.includes('/') || workstream.includes('\0')) {
    out.reason = 'the workstream has no descriptor file (not a file name): failing closed';
    return out;
  }
  out.path = path.join(configDir ?? defaultConfigDir(), 'workstreams', `${workstream}.v1`);
  let data;
  try {
    data = fs.readFileSync(out.path);
  } catch (e) {
    out.reason = `no descriptor file ${out.path} (${e.code || e.message}), so no fallback: failing closed`;
    return out;
  }
  const d = parseDescriptor(data);
  if (d.errors.length) {
    const e = d.errors[0];
    out.reason = `${out.path}${e.line ? `:${e.line}` : ''}: ${e.message}: failing closed`;
    return out;
  }
  const v = d.values;
  if (v.workstream !== undefined && v.workstream !== workstream)
    out.reason = `${out.path}: workstream: is not the file's name: failing closed`;
  else if ((v.origin ?? '') !== (scope ?? ''))
    out.reason = `${out.path}: its origin is not this client's scope: failing closed`;
  else if (v.fallback === undefined || v.fallback === null)
    out.reason = `${out.path} names no fallback: failing closed`;
  else {
    out.fallback = v.fallback;
    out.action = fallbackAction(v.fallback);
    out.reason = `fallback ${v.fallback} (${out.path}): ${
      out.action === 'read-only' ? 'read-only, with no generation'
        : out.action === 'single-instance' ? 'single-instance, only where the user chose it' : 'failing closed'}`;
  }
  return out;
}

/**
 * The stand-in a leader callback gets when the descriptor's fallback runs it
 * without a broker: no generation, mode 'read-only' or 'single-instance',
 * state FOLLOWER; commit, claim, abandon, pending, read and drain reject
 * (ReadOnlyError in read-only mode, ConnectError otherwise: nothing reaches
 * the ledger).
 */
export class FallbackLeader extends EventTarget {
  constructor(workstream, fb, mode, signal, cause) {
    super();
    this.workstream = workstream;
    this.generation = undefined;
    this.leaseMs = undefined;
    this.mode = mode;
    this.state = 'FOLLOWER';
    this.drainReason = undefined;
    this.fallback = fb.fallback;
    this.fallbackPath = fb.path;
    this.cause = cause;
    this.signal = signal ?? new AbortController().signal;
  }

  #refuse(what) {
    const msg = `${what}: '${this.workstream}' runs on its fallback ${this.fallback} without a broker: no generation`;
    return Promise.reject(this.mode === 'read-only' ? new ReadOnlyError(msg) : new ConnectError(msg));
  }

  commit() { return this.#refuse('commit'); }
  claim() { return this.#refuse('claim'); }
  abandon() { return this.#refuse('abandon'); }
  pending() { return this.#refuse('pending'); }
  read() { return this.#refuse('read'); }
  drain() { return this.#refuse('drain'); }
}

/**
 * cause (an error saying the broker cannot be reached) happened while
 * campaigning for workstream: runs fn as the descriptor file's fallback
 * says and resolves with its result, or rejects with an error of cause's
 * code (.cause: cause; .fallback: the decision, and why it failed closed).  options: configDir, scope, singleInstance
 * (the user chose this instance to run alone), signal.
 */
export async function runLeaderFallback(workstream, options, fn, cause) {
  const fb = readLeaderFallback(workstream, options);
  let mode;
  if (fb.action === 'read-only') mode = 'read-only';
  else if (fb.action === 'single-instance' && options.singleInstance) mode = 'single-instance';
  if (!mode) {
    const reason = fb.action === 'single-instance'
      ? `fallback SINGLE_INSTANCE (${fb.path}): only the instance started with singleInstance runs alone; failing closed`
      : fb.reason;
    // a fresh error of cause's kind (a client may hand the same error to many calls)
    const e = cause instanceof CoordError
      ? CoordError.from(cause.code, `${cause.message}; ${reason}`)
      : new ConnectError(`the broker cannot be reached: ${reason}`, undefined);
    if (cause !== undefined) e.cause = cause;
    e.fallback = { ...fb, reason };
    throw e;
  }
  return fn(new FallbackLeader(workstream, fb, mode, options.signal, cause));
}
