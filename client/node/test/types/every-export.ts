// every-export.ts - type-checked by tsc --noEmit (test/types.test.js), never
// run: every export of the package used as its README shows, through the
// package's own name (so the "exports" map's "types" is what is checked).
import {
  connect, Client, defaultSocketPath, Lock, LockManager, DEFAULT_LEASE_MS, Leader, LeaderState,
  CoordError, FencedError, TimeoutError, DisabledError, NotFoundError, ClosedError,
  ConnectError, AbortedError, ProtocolPinnedError, PolicyError, ReadOnlyError, DrainingError,
  UnavailableError, FlightFailedError, BackoffError, RetryAfterError, RequestKeyError,
  WIRE_CODES, CLIENT_CODES, requestKey, wtf8Encode, wtf8Decode, ResultRef,
  FallbackLeader, parseDescriptor, readLeaderFallback, runLeaderFallback, defaultConfigDir,
} from 'coord-client';
import type {
  ConnectOptions, LockOptions, LockInfo, LockManagerSnapshot, CoordBroadcastChannel, OnceOptions,
  OnceContext, OnceResult, JoinResult, RequestKeyInput, RecordEntry, LeaderOptions, ClaimResult,
  PendingOp, WorkstreamDescriptor, LeaderInfo, LeaderTerm, LifecycleEvent, LeaderStateName,
  LeaderFallback, FallbackAction, ParsedDescriptor, WorkstreamDefinition,
} from 'coord-client';
import pkg from 'coord-client/package.json' with { type: 'json' };

const version: string = pkg.version;
const socket: string = defaultSocketPath();
const options: ConnectOptions = { socket, scope: 'types', requestTimeoutMs: 1000 };

export async function uses(): Promise<void> {
  const client: Client = await connect(options);
  const manager: LockManager = client.locks;
  const lockOptions: LockOptions = { mode: 'shared', timeout: 500 };
  const token: number = await manager.request('build', lockOptions, (lock) => (lock ? lock.token : 0));
  const held: Lock | null = await manager.request('build', { ifAvailable: true }, (lock) => lock);
  const snapshot: LockManagerSnapshot = await manager.query();
  const first: LockInfo | undefined = snapshot.held[0];

  const bc: CoordBroadcastChannel = new client.BroadcastChannel('settings');
  bc.postMessage({ theme: 'dark' });
  bc.close();

  const onceOptions: OnceOptions = { keep: 60_000, stale: 600_000 };
  const r: OnceResult<string> = await client.once('feed', (ctx: OnceContext) => `fence ${ctx.fence}`, onceOptions);
  const joined: JoinResult = await client.flight.join('feed');
  const input: RequestKeyInput = { method: 'GET', url: 'https://api.example.com/items', user: 'ada', authGen: 1 };
  const key: string = requestKey(input).key + client.requestKey(input).canonical;
  const rec: RecordEntry | null = await client.records.get('feed');
  // results by reference: read into result by default, a ResultRef with ref: true
  const big = await client.flight.join('big', { ref: true });
  if (big.role === 'result') {
    if (big.resultRef) {
      const ref: ResultRef = big.resultRef;
      const size: number = ref.size;
      for await (const chunk of ref.stream({ highWaterMark: 1 << 20 })) void (chunk satisfies Uint8Array);
      const again = await client.records.get('big', { ref: true });
      const whole: Uint8Array | undefined = await again?.resultRef?.buffer();
      await again?.resultRef?.close();
      void [size, whole];
    } else {
      const bytes: Uint8Array = big.result;
      void bytes;
    }
  }
  if (joined.role === 'result') {
    const bytes: Uint8Array = joined.result;
    void bytes;
  }

  // leader(): the callback's leader is never null unless ifAvailable
  const gen: number = await client.leader('outbox', (leader) => leader.generation);
  const opts = { lease: DEFAULT_LEASE_MS * 10, protocol: 'outbox@1' } satisfies LeaderOptions;
  const gen2: number = await client.leader('outbox', opts, (leader) => leader.generation);
  const gen3: number = await client.leader('outbox', { timeout: 1000 }, (leader) => leader.generation);
  const maybe: number | null = await client.leader('outbox', { ifAvailable: true }, (leader) => leader?.generation ?? null);
  // @ts-expect-error: with ifAvailable the leader may be null
  await client.leader('outbox', { ifAvailable: true }, (leader) => leader.generation);
  const either = { ifAvailable: Math.random() > 0.5 };
  // @ts-expect-error: ifAvailable known only at run time: null is possible
  await client.leader('outbox', either, (leader) => leader.generation);
  await client.leader('outbox', (leader: Leader) => {
    const state: LeaderStateName = leader.state;
    const isLeader: boolean = state === LeaderState.LEADER;
    return leader.claim('op-1').then((c: ClaimResult) => c.claimed && isLeader);
  });
  const pending: PendingOp[] = await client.leaders.pending('outbox');
  const desc: WorkstreamDescriptor | null = await client.leaders.describe('outbox');
  const info: LeaderInfo = await client.leaders.info('outbox');
  const terms: LeaderTerm[] = await client.leaders.history('outbox');

  // the descriptor file's fallback when no broker can be reached (opt-in)
  const def: WorkstreamDefinition = { lockName: 'app:leader:outbox:v3', capabilities: ['outbox'], ifAvailable: 'never', canonicalFence: 'server-lease-ledger' };
  const named: string = (await client.leaders.define('outbox', def)).lockName;
  const fbGen: number | undefined = await client.leader('outbox', { fallback: true, capabilities: ['outbox'] },
    (leader) => (leader instanceof FallbackLeader ? leader.generation : leader.generation));
  // @ts-expect-error: with fallback the leader may be a FallbackLeader, whose generation is undefined
  const notNumber: number = await client.leader('outbox', { fallback: true }, (leader) => leader.generation);
  const decision: LeaderFallback = readLeaderFallback('outbox', { configDir: defaultConfigDir(), scope: '' });
  const action: FallbackAction = decision.action;
  const parsed: ParsedDescriptor = parseDescriptor('schema: crossTabLeader.v1\n');
  const mode: string = await runLeaderFallback('outbox', { singleInstance: false }, (fb: FallbackLeader) => fb.mode, new ConnectError('no broker'));

  for await (const ev of client.watch('-locks')) {
    const e: LifecycleEvent = ev;
    if (e.what === 'released') break;
  }

  const errors: Array<new (...args: any[]) => Error> = [
    CoordError, FencedError, TimeoutError, DisabledError, NotFoundError, ClosedError, ConnectError,
    AbortedError, ProtocolPinnedError, PolicyError, ReadOnlyError, DrainingError, UnavailableError,
    FlightFailedError, BackoffError, RetryAfterError, RequestKeyError,
  ];
  const e: CoordError = CoordError.from('TIMEOUT', 'timed out after 0.5 s');
  const codes: readonly string[] = [...WIRE_CODES, ...CLIENT_CODES];
  const text: string = wtf8Decode(wtf8Encode('x'));
  void [version, token, held, first, r, joined, key, rec, gen, gen2, gen3, maybe, pending, desc,
        info, terms, errors, e, codes, text, named, fbGen, notNumber, action, parsed, mode];
  await client.close();
}
