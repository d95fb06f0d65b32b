// index.js - the package's entry point: connect() and the error classes.
// See README.md; the protocol is protocol/PROTOCOL.md in the coord tree.
export { connect, Client } from './client.js';
export { defaultSocketPath } from './connection.js';
export { Lock, LockManager } from './locks.js';
export { DEFAULT_LEASE_MS, Leader, LeaderState } from './leader.js';
export {
  FallbackLeader, parseDescriptor, readLeaderFallback, runLeaderFallback, defaultConfigDir,
} from './descfile.js';
export {
  CoordError, FencedError, TimeoutError, DisabledError, NotFoundError, ClosedError,
  ConnectError, AbortedError, ProtocolPinnedError, PolicyError, ReadOnlyError, DrainingError,
  UnavailableError, FlightFailedError, BackoffError, RetryAfterError, RequestKeyError,
  WIRE_CODES, CLIENT_CODES,
} from './errors.js';
export { requestKey } from './request-key.js';
export { ResultRef } from './result-ref.js';
export { wtf8Encode, wtf8Decode } from './wire.js';
