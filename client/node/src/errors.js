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
export const CLIENT_CODES = Object.freeze(['CONNECT', 'CLOSED', 'PROTOCOL']);

export class CoordError extends Error {
  /** @param {string} code @param {string} message */
  constructor(code, message, options) {
    super(message || code, options);
    this.code = code;
  }

  get name() { return 'CoordError'; }

  /** The error for a failed reply {code, message}: the subclass of its code. */
  static from(code, message) {
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
// leadership part 2: descriptors, rollout modes, draining, remote ledgers
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
    super(code, message);
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
