// errors.js - CoordError, the error of every failed coord call.
//
// `code` is the protocol's code string (protocol/PROTOCOL.md, "Error codes")
// or one of the client's own: CONNECT (no broker reachable), CLOSED (the
// connection is gone or was closed), PROTOCOL (the broker sent something this
// client cannot read).  A few codes get a subclass so that both
// `err.code === 'FENCED'` and `err instanceof FencedError` read naturally.
// Web Locks errors stay what the Web Locks API throws (TypeError and
// DOMException), see locks.js.

export const WIRE_CODES = Object.freeze([
  'BAD_FRAME', 'HELLO_REQUIRED', 'PROTO_VERSION', 'BAD_REQUEST', 'UNKNOWN_OP',
  'INVALID_OPTIONS', 'NAME_RESERVED', 'TOO_LARGE', 'LIMIT', 'ABORTED', 'TIMEOUT',
  'FENCED', 'NOT_FOUND', 'UNKNOWN_LOCK', 'DISABLED', 'STORAGE', 'SHUTTING_DOWN',
  'PROTOCOL_PINNED', 'POLICY', 'READ_ONLY', 'DRAINING', 'UNAVAILABLE',
]);
export const CLIENT_CODES = Object.freeze(['CONNECT', 'CLOSED', 'PROTOCOL', 'GONE']);

// Longest text from the wire put into an error message (the broker's own
// messages are at most 4096 bytes; a hostile one is cut here).
const MAX_WIRE_TEXT = 4096;

/** Text from the wire (an error's code or message, a name, a reason) as it
 * may go into an error message: control characters (C0, DEL, C1) escaped as
 * \xHH, U+2028/U+2029 as \uHHHH, cut at 4096 characters.  Not a string: ''. */
export function printable(s, max = MAX_WIRE_TEXT) {
  if (typeof s !== 'string') return '';
  let t = s.length > max ? `${s.slice(0, max)}...` : s;
  // eslint-disable-next-line no-control-regex
  t = t.replace(/[\x00-\x1f\x7f-\x9f\u2028\u2029]/g, (c) => {
    const n = c.charCodeAt(0);
    return n < 0x100 ? `\\x${n.toString(16).padStart(2, '0')}` : `\\u${n.toString(16)}`;
  });
  return t;
}

export class CoordError extends Error {
  /** @param {string} code @param {string} message */
  constructor(code, message, options) {
    super(message || code, options);
    this.code = code;
  }

  get name() { return 'CoordError'; }

  /** The error for a failed reply {code, message} from the broker: the
   * subclass of its code; both are made printable (control bytes escaped). */
  static from(code, message) {
    code = printable(code, 256) || 'PROTOCOL';
    message = printable(message);
    const C = BY_CODE[code] || CoordError;
    return C === CoordError ? new CoordError(code, message) : new C(message, code);
  }
}

function sub(code, className) {
  const C = class extends CoordError {
    constructor(message, c = code) { super(c, message); }
    get name() { return className; }
  };
  Object.defineProperty(C, 'name', { value: className });
  return C;
}

export const FencedError = sub('FENCED', 'FencedError');
export const TimeoutError = sub('TIMEOUT', 'TimeoutError');
export const DisabledError = sub('DISABLED', 'DisabledError');
export const NotFoundError = sub('NOT_FOUND', 'NotFoundError');
export const ClosedError = sub('CLOSED', 'ClosedError');
export const ConnectError = sub('CONNECT', 'ConnectError');
export const AbortedError = sub('ABORTED', 'AbortedError');
// leadership's descriptors and policies: a protocol or capability pin, a steal
// or if_available policy, a rollout mode, draining, a remote ledger out of reach
export const ProtocolPinnedError = sub('PROTOCOL_PINNED', 'ProtocolPinnedError');
export const PolicyError = sub('POLICY', 'PolicyError');
export const ReadOnlyError = sub('READ_ONLY', 'ReadOnlyError');
export const DrainingError = sub('DRAINING', 'DrainingError');
export const UnavailableError = sub('UNAVAILABLE', 'UnavailableError');

const BY_CODE = {
  FENCED: FencedError, TIMEOUT: TimeoutError, DISABLED: DisabledError,
  NOT_FOUND: NotFoundError, CLOSED: ClosedError, CONNECT: ConnectError,
  ABORTED: AbortedError, PROTOCOL_PINNED: ProtocolPinnedError, POLICY: PolicyError,
  READ_ONLY: ReadOnlyError, DRAINING: DrainingError, UNAVAILABLE: UnavailableError,
};

/** What a single-flight owner's failure looks like to the others: `code` and
 * `message` are the owner's (flight.fail), not a protocol code. */
export class FlightFailedError extends CoordError {
  constructor(code, message, { retryable = false, fence, source, ageMs } = {}) {
    super(printable(code, 256) || 'ERROR', printable(message));
    this.retryable = retryable;
    this.fence = fence;
    this.source = source;
    this.ageMs = ageMs;
  }

  get name() { return 'FlightFailedError'; }
}

/** A join during a backoff (flight.fail with retryAfter): the failure that
 * started it, `retryAfter` the ms left, `source` 'backoff'.  Also what a
 * follower of the failing run gets (`source` 'live', `retryAfter` the whole
 * backoff). */
export class BackoffError extends FlightFailedError {
  constructor(code, message, { retryAfter, ...rest } = {}) {
    super(code, message, { retryable: true, ...rest });
    this.retryAfter = retryAfter;
  }

  get name() { return 'BackoffError'; }
}

/** Thrown by a once() function to ask for a backoff: flight.fail with
 * retryable and retry_after_ms = `retryAfter` (ms); the others' joins get a
 * BackoffError until it has passed.  `code` defaults to 'RETRY_AFTER'. */
export class RetryAfterError extends Error {
  constructor(retryAfter, message = `retry after ${retryAfter} ms`, { code = 'RETRY_AFTER', cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    if (!Number.isFinite(retryAfter) || retryAfter < 0)
      throw new TypeError('RetryAfterError: retryAfter must be a non-negative number of milliseconds');
    this.retryAfter = retryAfter;
    this.code = code;
  }

  get name() { return 'RetryAfterError'; }
}

/** requestKey(): an input that has no key.  `field` names it ('method',
 * 'url', 'body', 'header', 'user', 'freshness', or another input's name for a
 * wrong type), as the vectors' `error_field` does. */
export class RequestKeyError extends TypeError {
  constructor(field, message) {
    super(message);
    this.field = field;
  }

  get name() { return 'RequestKeyError'; }
}
