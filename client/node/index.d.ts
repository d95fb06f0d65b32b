// Types of coord-client, the Node.js client of coord (hand-written: see src/).

export interface ConnectOptions {
  /** Socket path (default: $COORD_SOCKET, $XDG_RUNTIME_DIR/coord/broker.sock, /tmp/coord-$UID/broker.sock). */
  socket?: string;
  /** Scope namespacing every name of this connection (default ""). */
  scope?: string;
  /** Client name shown by the broker (default: the script's file name). */
  client?: string;
  /** Aborts the connect; once connected, aborting closes the client. */
  signal?: AbortSignal;
  /** Start coordd when nobody listens (default true). */
  autostart?: boolean;
  /** coordd to start (default $COORD_BROKER, else `coordd` from PATH). */
  broker?: string;
  /** --idle-exit of an autostarted broker, seconds (default 60). */
  idleExit?: number;
  /** Connect (and autostart) deadline, ms (default 2000). */
  connectTimeout?: number;
  /** Reconnect after the connection is lost (default false). */
  reconnect?: boolean;
  /** Deadline of every request that does not wait by design (all but
   * lock.acquire, flight.join, leader.campaign), ms (default 30000; 0: none).
   * Past it the call rejects with TimeoutError ("timed out after 30 s"); the
   * connection stays open and a late reply is ignored. */
  requestTimeoutMs?: number;
}

export declare function connect(options?: ConnectOptions): Promise<Client>;
export declare function defaultSocketPath(): string;

export type LockMode = 'exclusive' | 'shared';

export interface LockOptions {
  mode?: LockMode;
  ifAvailable?: boolean;
  steal?: boolean;
  signal?: AbortSignal;
  /** coord: give up waiting after this many ms (TimeoutError). */
  timeout?: number;
  /** coord: lease in ms, renewed automatically while the callback runs. */
  lease?: number;
}

export declare class Lock {
  readonly name: string;
  readonly mode: LockMode;
  /** Fencing token: strictly increasing per name, across broker restarts. */
  readonly token: number;
  /** Aborted when the lock is lost (stolen, lease expired, connection gone). */
  readonly signal: AbortSignal;
}

export interface LockInfo {
  name: string;
  mode: LockMode;
  clientId: string;
  conn: number;
  client: string;
  pid: number;
  ageMs: number;
  token?: number;
}

export interface LockManagerSnapshot {
  held: LockInfo[];
  pending: LockInfo[];
}

export type LockGrantedCallback<T> = (lock: Lock | null) => T | PromiseLike<T>;

export declare class LockManager {
  request<T>(name: string, callback: LockGrantedCallback<T>): Promise<Awaited<T>>;
  request<T>(name: string, options: LockOptions, callback: LockGrantedCallback<T>): Promise<Awaited<T>>;
  query(): Promise<LockManagerSnapshot>;
}

export interface CoordBroadcastChannel extends EventTarget {
  readonly name: string;
  /** Resolves once the subscription reached the broker. */
  readonly ready: Promise<void>;
  onmessage: ((this: CoordBroadcastChannel, ev: MessageEvent) => any) | null;
  onmessageerror: ((this: CoordBroadcastChannel, ev: MessageEvent) => any) | null;
  postMessage(message: unknown): void;
  close(): void;
  ref(): this;
  unref(): this;
}

export interface OnceOptions {
  /** Owner's time to complete, ms (default 30000). */
  ttl?: number;
  /** Follower's wait for a result, ms (default ttl; 0 = no limit). */
  wait?: number;
  /** Keep a completion record this long, ms (default 0: none). */
  keep?: number;
  /** Accept a record no older than this, ms. */
  maxAge?: number;
  /** Serve a completed record older than maxAge but younger than maxAge + stale at once, while one caller revalidates it, ms. */
  stale?: number;
  /** Be told (client 'flight.updated' event) when the revalidation this caller was served stale for ends. */
  notify?: boolean;
  /** Called once when that revalidation ends (implies notify); status 'lost' when the connection is lost first. */
  onUpdated?: (update: FlightUpdate) => void;
  abortWhenOrphaned?: boolean;
  signal?: AbortSignal;
  /** Values are Uint8Array as is (default: MessagePack-encoded values). */
  raw?: boolean;
  /** Whether a throwing fn's failure is retryable by followers. */
  retryable?: boolean | ((err: unknown) => boolean);
  /** When the broker cannot be reached or a follower's wait passes: 'fail' (default) rejects with the error, 'run' runs fn here (source 'local'), 'retry' joins once more after a timeout, then runs fn here. Only for work safe to repeat. */
  fallback?: 'fail' | 'run' | 'retry';
  /** The running owner's work is stale: take the flight over (it is aborted, reason 'superseded'; its followers get ours). */
  supersede?: boolean;
  /** A higher priority than the running owner's supersedes it (default 0). */
  priority?: number;
  /** The version of the code that runs fn (at most 64 bytes), kept in the flight and its record. */
  version?: string;
  /** A flight of another version runs: 'follow' it (default, compatible) or run our 'own' (and never take another version's record). */
  otherVersion?: 'follow' | 'own';
}

export interface FlightUpdate {
  key: string;
  status: 'completed' | 'failed' | 'lost';
  /** The revalidation's fence (not with 'lost'). */
  fence?: number;
  /** 'lost' only: the connection's error. */
  error?: Error;
}

export interface OnceContext {
  /** undefined when running locally (fallback 'run'). */
  fence: number | undefined;
  flight: number | undefined;
  key: string;
  /** Aborted on flight.abort (deadline, orphaned), options.signal, connection loss. */
  signal: AbortSignal;
  /** A revalidation: the stale record being revalidated. */
  stale?: { value: unknown; ageMs: number; fence: number };
  /** The key's prefix is disabled (kill switch): no deduplication, no record. */
  bypass: boolean;
  /** Running without coordination (fallback 'run'). */
  local?: true;
}

export interface OnceResult<T> {
  value: T;
  source: 'owner' | 'bypass' | 'live' | 'record' | 'stale' | 'local';
  fence: number | undefined;
  ageMs: number;
  /** A record served inside the stale window (source 'stale'). */
  stale: boolean;
  /** Stale, and a revalidation runs meanwhile. */
  revalidating: boolean;
  /** Owner only: followers the result reached. */
  delivered?: number;
  /** Owner only: the kill switch was on for the key (source 'bypass'). */
  bypass?: boolean;
  /** Owner only: this run revalidated a stale record. */
  revalidated?: boolean;
  /** 'local' only: why the broker could not be used. */
  reason?: Error;
  /** 'local' only: 'unreachable' (no broker, connection lost) or 'timeout' (a follower's wait passed). */
  fallbackCause?: 'unreachable' | 'timeout';
  /** fallback 'retry': a follower's wait passed and this caller joined again. */
  retried?: boolean;
  /** Owner only: this caller superseded an owner (its fence). */
  superseded?: number;
}

/** The file handle of a ResultRef (Node's fs.promises.FileHandle, read-only). */
export interface ResultFileHandle {
  readonly fd: number;
  read(buffer: Uint8Array, offset: number, length: number, position: number): Promise<{ bytesRead: number }>;
  close(): Promise<void>;
}

/** The stream of a ResultRef (Node's fs.ReadStream). */
export interface ResultStream extends AsyncIterable<Uint8Array> {
  destroy(error?: Error): this;
  on(event: string, listener: (...args: any[]) => void): this;
  pipe<W>(destination: W, options?: { end?: boolean }): W;
}

/**
 * A result by reference (an owner completed with a sealed memfd): a
 * read-only file of `size` bytes that the caller owns.  Close it
 * (close(), or Symbol.asyncDispose: `await using`); stream() hands the file to the stream,
 * which closes it when it ends or is destroyed.
 */
export declare class ResultRef {
  private constructor();
  readonly size: number;
  /** The open file (still the ResultRef's); throws once closed. */
  readonly handle: ResultFileHandle;
  readonly closed: boolean;
  /** The whole result as one Buffer, from offset 0. */
  buffer(options?: { signal?: AbortSignal }): Promise<Uint8Array>;
  /** The bytes as a stream from offset 0 (start/end within the result, highWaterMark). */
  stream(options?: { start?: number; end?: number; highWaterMark?: number }): ResultStream;
  close(): Promise<void>;
}

/** A result's bytes: inline, or a result by reference read into a Buffer. */
export type ResultBytes = { result: Uint8Array; resultRef?: undefined };
/** With the option ref: true, a result by reference comes as a ResultRef. */
export type ResultOrRef = ResultBytes | { result?: undefined; resultRef: ResultRef };

export type JoinResult<B = ResultBytes> =
  | { role: 'owner'; key: string; flight: number; fence: number; signal: AbortSignal; bypass: boolean; stale?: B & { ageMs: number; fence: number }; superseded?: number; version?: string }
  | ({ role: 'result'; key: string; fence: number; ageMs: number; source: 'live' | 'record'; stale: boolean; revalidating: boolean } & B)
  | { role: 'failed'; key: string; error: { code: string; message: string }; retryable: boolean; retryAfter?: number; fence?: number; ageMs?: number; source?: 'live' | 'record' | 'backoff' };

export interface JoinOptions extends Omit<OnceOptions, 'keep' | 'raw' | 'retryable' | 'fallback'> {
  /** A result by reference comes as `resultRef` (a ResultRef the caller closes) instead of being read into `result`. */
  ref?: boolean;
}

export interface Flight {
  join(key: string, options: JoinOptions & { ref: true }): Promise<JoinResult<ResultOrRef>>;
  join(key: string, options?: JoinOptions): Promise<JoinResult>;
  complete(flight: number, fence: number, result: Uint8Array, options?: { keep?: number }): Promise<{ delivered: number }>;
  fail(flight: number, fence: number, error: { code?: string; message?: string }, options?: { retryable?: boolean; retryAfter?: number; keep?: number }): Promise<{ delivered: number }>;
  list(): Promise<Array<{ key: string; flight: number; fence: number; ownerConn: number; ownerPid?: number; followers: number; ageMs: number; completing?: boolean; version?: string }>>;
  /** Kill switch: joins of keys under prefix ('' = all) bypass single-flight until enable(prefix). */
  disable(prefix: string): Promise<void>;
  enable(prefix: string): Promise<void>;
  disabled(): Promise<string[] & { truncated?: true }>;
}

export interface RequestKeyInput {
  method: string;
  url: string;
  /** A string (its UTF-8) or bytes; absent = no body, '' = an empty body (hashed). */
  body?: string | Uint8Array | ArrayBuffer | ArrayBufferView | null;
  contentType?: string | null;
  /** [name, value] pairs (order kept for repeated names), a Map/Headers, or an object. */
  headers?: Iterable<readonly [string, string]> | Record<string, string> | null;
  user: string;
  tenant?: string | null;
  /** The user's credential generation (0 when none): never a token. */
  authGen: number | bigint;
  accept?: string | null;
  locale?: string | null;
  freshness?: 'cache-ok' | 'revalidate' | 'network-only' | null;
  api?: string | null;
}

export declare function requestKey(request: RequestKeyInput): { key: string; canonical: string };

export interface LatencyHistogram { count: number; p50Ms: number; p99Ms: number; maxMs: number; }

export interface RecordEntry {
  key: string;
  status: 'completed' | 'failed';
  fence: number;
  createdMs: number;
  expiresMs: number;
  value?: unknown;
  result?: Uint8Array;
  /** Kept by reference and asked for with ref: true: the file (the caller closes it); no value. */
  resultRef?: ResultRef;
  error?: { code: string; message: string };
  retryable?: boolean;
  /** The owner that wrote it (its hello) and its version (absent from an older broker's records). */
  client?: string;
  pid?: number;
  instance?: string;
  version?: string;
}

export interface Records {
  /** ref: a record kept by reference comes as resultRef (else it is read into result and value); signal stops that read. */
  get(key: string, options?: { raw?: boolean; ref?: boolean; signal?: AbortSignal }): Promise<RecordEntry | null>;
  list(prefix?: string, options?: { limit?: number }): Promise<Array<{ key: string; status: string; fence: number; size: number; createdMs: number; expiresMs: number; client?: string; pid?: number; instance?: string; version?: string; byRef?: true }> & { truncated?: true }>;
  purge(prefix?: string, options?: { counts?: false }): Promise<number>;
  purge(prefix: string, options: { counts: true }): Promise<{ deleted: number; fenced: number }>;
}

/** The broker's leadership lease (ms) when a campaign names none; renewed every lease/3. */
export declare const DEFAULT_LEASE_MS: 1500;
export declare const LeaderState: {
  readonly FOLLOWER: 'FOLLOWER';
  readonly REQUESTING: 'REQUESTING';
  readonly LEADER: 'LEADER';
  readonly DRAINING: 'DRAINING';
  readonly RELEASED: 'RELEASED';
  readonly ABORTED: 'ABORTED';
};
export type LeaderStateName = keyof typeof LeaderState;

export type RolloutMode = 'active' | 'shadow' | 'read-only';
export type StealPolicy = 'never' | 'incident-only' | 'allowed';
export type DrainReason = 'self' | 'requested' | 'max_hold';

export interface LeaderOptions {
  /** Lease in ms (default DEFAULT_LEASE_MS, 1500: the broker's), renewed at a third of it while the callback runs. */
  lease?: number;
  /** 'name@N': refused with ProtocolPinnedError below the workstream's pin; a newer N raises it. */
  protocol?: string;
  steal?: boolean;
  /** Incident text (1..256 bytes): granted while disabled; needed to steal under 'incident-only'. */
  incident?: string;
  ifAvailable?: boolean;
  timeout?: number;
  signal?: AbortSignal;
  /** ms after a 'drain' event (max_hold, requested) after which leader.signal aborts (DrainingError). Default: none. */
  drainGrace?: number;
  /** Commit/read values are Uint8Array as is (default: MessagePack). */
  raw?: boolean;
  /** What this client implements; a workstream pinning a capability it lacks refuses the campaign (ProtocolPinnedError). */
  capabilities?: string[] | string;
  /** Without a broker (the campaign fails with CONNECT or CLOSED), act on the workstream's descriptor file's fallback: fn may get a FallbackLeader. Default false: the error stands. */
  fallback?: boolean;
  /** With fallback: the config dir holding workstreams/WORKSTREAM.v1 (default $COORD_CONFIG_DIR, $XDG_CONFIG_HOME/coord, ~/.config/coord). */
  configDir?: string;
  /** With fallback, under SINGLE_INSTANCE: this is the one instance the user chose to run alone. */
  singleInstance?: boolean;
}

export type FallbackAction = 'fail-closed' | 'read-only' | 'single-instance';

export interface LeaderFallback {
  action: FallbackAction;
  /** The file's fallback name (SERVER_COORDINATED, ...), undefined when none. */
  fallback?: string;
  path?: string;
  reason: string;
}

/** The callback's argument when the descriptor's fallback runs it without a broker: no generation; its calls reject. */
export declare class FallbackLeader extends EventTarget {
  readonly workstream: string;
  readonly generation: undefined;
  readonly mode: 'read-only' | 'single-instance';
  readonly state: 'FOLLOWER';
  readonly fallback: string;
  readonly fallbackPath: string;
  /** The error that said the broker cannot be reached. */
  readonly cause: unknown;
  readonly signal: AbortSignal;
  commit(...args: unknown[]): Promise<never>;
  claim(...args: unknown[]): Promise<never>;
  abandon(...args: unknown[]): Promise<never>;
  pending(...args: unknown[]): Promise<never>;
  read(...args: unknown[]): Promise<never>;
  drain(): Promise<never>;
}

export interface ParsedDescriptor {
  values: Record<string, string | null>;
  maxHoldMs?: number;
  capabilities?: string;
  disabled?: boolean;
  errors: { line: number; message: string }[];
}

export declare function parseDescriptor(data: Uint8Array | string): ParsedDescriptor;
export declare function defaultConfigDir(): string;
export declare function readLeaderFallback(workstream: string, options?: { configDir?: string; scope?: string }): LeaderFallback;
/** Runs fn as workstream's descriptor file says when cause (no broker) happened, or rejects with cause (.fallback says why). */
export declare function runLeaderFallback<T>(workstream: string,
  options: { configDir?: string; scope?: string; singleInstance?: boolean; signal?: AbortSignal },
  fn: (leader: FallbackLeader) => T | PromiseLike<T>, cause?: unknown): Promise<Awaited<T>>;

export interface DrainEvent extends CustomEvent<{ reason: 'max_hold' | 'requested' }> {}
export interface ModeEvent extends CustomEvent<{ mode: RolloutMode }> {}

export interface ClaimResult {
  claimed: boolean;
  /** An earlier generation claimed it and never settled it: reconcile by this op id first. */
  reconcile: boolean;
  applied: boolean;
  abandoned: boolean;
  previousGeneration?: number;
  claimedMs?: number;
  /** With applied: the generation that applied it. */
  generation?: number;
}

export interface PendingOp {
  opId: string;
  generation: number;
  claimedMs: number;
  live: boolean;
}

export declare class Leader extends EventTarget {
  readonly workstream: string;
  readonly generation: number;
  readonly leaseMs: number;
  /** The rollout mode, updated by the broker's leader.mode events. */
  readonly mode: RolloutMode;
  readonly state: LeaderStateName;
  readonly drainReason: DrainReason | null;
  /** Aborted when leadership is lost (FencedError with .reason, .incident) or a drain's grace passed (DrainingError). */
  readonly signal: AbortSignal;
  ondrain: ((ev: DrainEvent) => void) | null;
  onmode: ((ev: ModeEvent) => void) | null;
  addEventListener(type: 'drain', listener: (ev: DrainEvent) => void, options?: AddEventListenerOptions | boolean): void;
  addEventListener(type: 'mode', listener: (ev: ModeEvent) => void, options?: AddEventListenerOptions | boolean): void;
  addEventListener(type: string, listener: EventListenerOrEventListenerObject | null, options?: AddEventListenerOptions | boolean): void;
  commit(opId: string, key?: string, value?: unknown): Promise<{ applied: boolean; duplicate?: true; abandoned?: true; generation?: number }>;
  claim(opId: string): Promise<ClaimResult>;
  abandon(opId: string, reason: string): Promise<{ abandoned: true; applied: false } | { abandoned: false; applied: true; generation: number }>;
  pending(options?: { limit?: number }): Promise<PendingOp[] & { truncated?: true }>;
  /** Announces this leader is finishing: new claims get DrainingError; state DRAINING. */
  drain(): Promise<void>;
  read(key: string): Promise<{ value: unknown; generation: number } | null>;
}

/** leader.define's fields: undefined (or left out) keeps the stored value, null returns to the default. */
export interface WorkstreamDefinition {
  protocol?: string | null;
  /** ms, 0 = none, at most 86,400,000. */
  maxHold?: number | null;
  steal?: StealPolicy | null;
  mode?: RolloutMode | null;
  fallback?: string | null;
  /** 'server-lease-ledger' is the remote ledger (coordd --ledger etcd; 'etcd' is the same). */
  canonicalFence?: 'local' | 'server-lease-ledger' | 'etcd' | null;
  /** The leadership lock's name (1..200 bytes, not starting with '-'); null: '-leader/WORKSTREAM'. */
  lockName?: string | null;
  /** Every campaign must name each (ProtocolPinnedError otherwise). */
  capabilities?: string[] | string | null;
  /** 'never': ifAvailable campaigns get PolicyError. */
  ifAvailable?: 'allowed' | 'never' | null;
  /** Lets protocol lower (or remove) the pin. */
  force?: boolean;
}

export interface WorkstreamDescriptor {
  workstream: string;
  protocol: string | null;
  pinnedProtocol: string | null;
  maxHoldMs: number;
  steal: StealPolicy;
  mode: RolloutMode;
  fallback: string | null;
  canonicalFence: string;
  lockName: string;
  /** "a,b", null when none. */
  capabilities: string | null;
  ifAvailable: 'allowed' | 'never';
  definedMs: number;
}

export interface LeaderInfo {
  generation: number;
  state: 'leading' | 'draining' | 'idle' | 'disabled';
  mode: RolloutMode;
  disabled: boolean;
  maxHoldMs?: number;
  pinnedProtocol?: string;
  liveGeneration?: number;
  conn?: number;
  client?: string;
  pid?: number;
  leaseLeftMs?: number;
  leadingMs?: number;
  protocol?: string;
  incident?: string;
  drainReason?: DrainReason;
  [k: string]: unknown;
}

export interface LeaderTerm {
  generation: number;
  client: string;
  pid: number;
  instance: string;
  protocol?: string;
  mode: RolloutMode;
  electedMs: number;
  /** 0 while live (or when its broker stopped: reason 'restart'). */
  endedMs: number;
  reason?: 'resigned' | 'expired' | 'stolen' | 'incident' | 'disabled' | 'max_hold' | 'disconnected' | 'restart' | string;
  incident?: string;
}

export interface Leaders {
  info(workstream: string): Promise<LeaderInfo>;
  define(workstream: string, descriptor?: WorkstreamDefinition): Promise<WorkstreamDescriptor>;
  /** null when never defined (the defaults apply). */
  describe(workstream: string): Promise<WorkstreamDescriptor | null>;
  history(workstream: string, options?: { limit?: number }): Promise<LeaderTerm[] & { truncated?: true }>;
  pending(workstream: string, options?: { limit?: number }): Promise<PendingOp[] & { truncated?: true }>;
  /** {live: false} when generation is fenced. */
  check(workstream: string, generation: number): Promise<{ live: true; leaseLeftMs: number; mode: RolloutMode } | { live: false }>;
  /** Asks generation's leader to drain (its 'drain' event, reason 'requested'). */
  drain(workstream: string, generation: number): Promise<void>;
  disable(workstream: string): Promise<{ generation: number }>;
  enable(workstream: string): Promise<void>;
  read(workstream: string, key: string, options?: { raw?: boolean }): Promise<{ value: unknown; generation: number } | null>;
}

export interface LifecycleEvent {
  channel: '-locks' | '-flights' | '-leaders' | string;
  what: string;
  atMs: number;
  [field: string]: unknown;
}

export interface Watch extends AsyncIterableIterator<LifecycleEvent> {
  readonly ready: Promise<void>;
}

export declare class Client extends EventTarget {
  readonly locks: LockManager;
  readonly BroadcastChannel: new (name: string) => CoordBroadcastChannel;
  readonly flight: Flight;
  readonly records: Records;
  readonly leaders: Leaders;
  /** maxRefBytes: the largest result by reference the broker takes (absent from an older broker). */
  readonly info: { broker: string; conn: number; epoch: number; maxFrame: number; proto: number; maxRefBytes?: number } | null;
  readonly clientId: string;
  readonly closed: boolean;
  once<T>(key: string, fn: (ctx: OnceContext) => T | PromiseLike<T>, options?: OnceOptions): Promise<OnceResult<Awaited<T>>>;
  /** The canonical request key of an HTTP request (needs no broker). */
  requestKey(request: RequestKeyInput): { key: string; canonical: string };
  /** fn gets the Leader once elected (a campaign that is not granted rejects: timeout, abort). */
  leader<T>(workstream: string, fn: (leader: Leader) => T | PromiseLike<T>): Promise<Awaited<T>>;
  /** fallback: without a broker, fn may get the descriptor file's FallbackLeader (no generation). */
  leader<T>(workstream: string, options: LeaderOptions & { fallback: true; ifAvailable: true }, fn: (leader: Leader | FallbackLeader | null) => T | PromiseLike<T>): Promise<Awaited<T>>;
  leader<T>(workstream: string, options: LeaderOptions & { fallback: true }, fn: (leader: Leader | FallbackLeader) => T | PromiseLike<T>): Promise<Awaited<T>>;
  /** ifAvailable: fn gets null when someone else leads. */
  leader<T>(workstream: string, options: LeaderOptions & { ifAvailable: true; fallback?: false }, fn: (leader: Leader | null) => T | PromiseLike<T>): Promise<Awaited<T>>;
  leader<T>(workstream: string, options: LeaderOptions & { ifAvailable?: false; fallback?: false }, fn: (leader: Leader) => T | PromiseLike<T>): Promise<Awaited<T>>;
  /** ifAvailable or fallback not known until run time: null and a FallbackLeader are possible. */
  leader<T>(workstream: string, options: LeaderOptions, fn: (leader: Leader | FallbackLeader | null) => T | PromiseLike<T>): Promise<Awaited<T>>;
  watch(channels: string | string[], options?: { signal?: AbortSignal }): Watch;
  /** The broker's counters, camelCase; latency: {lockWait, lockHold, flightRun, followerWait, leaderTransition}. */
  stats(): Promise<Record<string, any> & { latency?: Record<'lockWait' | 'lockHold' | 'flightRun' | 'followerWait' | 'leaderTransition', LatencyHistogram> }>;
  ping(): Promise<void>;
  close(): Promise<void>;
}

export declare class CoordError extends Error {
  constructor(code: string, message?: string);
  readonly code: string;
  /** The error reply's reason when it has one ('purged': a flight ended by records.purge). */
  reason?: string;
  static from(code: string, message?: string): CoordError;
}
/** reason: the broker's (expired, stolen, incident, disabled, max_hold, fenced); incident: with an incident steal. */
export declare class FencedError extends CoordError { reason?: string; incident?: string; }
export declare class TimeoutError extends CoordError {}
export declare class DisabledError extends CoordError {}
export declare class NotFoundError extends CoordError {}
export declare class ClosedError extends CoordError {}
export declare class ConnectError extends CoordError {}
export declare class AbortedError extends CoordError {}
export declare class ProtocolPinnedError extends CoordError {}
export declare class PolicyError extends CoordError {}
export declare class ReadOnlyError extends CoordError {}
/** Also leader.signal's reason when a drain's grace passed (reason: 'max_hold' | 'requested'). */
export declare class DrainingError extends CoordError { reason?: string; }
export declare class UnavailableError extends CoordError {}
export declare class FlightFailedError extends CoordError {
  readonly retryable: boolean;
  readonly fence?: number;
  readonly source?: string;
  readonly ageMs?: number;
}
/** Joins during a backoff (source 'backoff') and followers of the failing run (source 'live'). */
export declare class BackoffError extends FlightFailedError {
  /** ms left of the backoff. */
  readonly retryAfter: number;
}
/** Thrown by a once() function to ask for a backoff of retryAfter ms. */
export declare class RetryAfterError extends Error {
  constructor(retryAfter: number, message?: string, options?: { code?: string; cause?: unknown });
  readonly retryAfter: number;
  readonly code: string;
}
/** requestKey(): the input has no key; field names which. */
export declare class RequestKeyError extends TypeError {
  readonly field: string;
}
export declare const WIRE_CODES: readonly string[];
export declare const CLIENT_CODES: readonly string[];
export declare function wtf8Encode(s: string): Uint8Array;
export declare function wtf8Decode(b: Uint8Array): string;
