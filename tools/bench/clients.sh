#!/usr/bin/env bash
# tools/bench/clients.sh - the clients against what their users would pick
# instead, in one run on one machine: Node's locks.request against ioredis
# (client/node/bench/vs-ioredis.js), Python's blocking `with c.lock()` and
# asyncio `async with c.lock()` against redis-py's Lock and redis.asyncio's
# (client/python/bench_vs_redis.py).  Each script starts its own coordd and
# redis-server (Unix sockets in a temp dir) and alternates rounds between
# the two; the figure is coord's cycles/s over the peer's, median of the
# per-round ratios (>= 1: coord ahead; issue target >= 1.2x).
#
#   tools/bench/clients.sh [--seconds S] [--rounds N] [--placement P]...
#
# Placements (default: all three), as coord-bench's lock-cycle: on a small
# VM, waking a process on a CPU that sleeps costs tens of microseconds, so
# where the scheduler puts the processes weighs as much as either side:
#   same   the client and both servers pinned to CPU 1
#   split  the client on CPU 0, the servers on CPU 1
#   none   nobody pinned (the scheduler's placement: information)
# Needs: a build (build/broker/coordd, or COORD_BROKER), redis-server,
# python3-redis, node with `npm ci` done in client/node (ioredis is a
# devDependency, for the bench only).  Prints one table row per client and
# placement, then the scripts' JSON lines (CPU time per cycle of each
# client and server).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
seconds=1
rounds=6
placements=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --placement) placements+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "clients.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ ${#placements[@]} -gt 0 ] || placements=(same split none)

export COORD_BROKER="${COORD_BROKER:-$repo/build/broker/coordd}"
[ -x "$COORD_BROKER" ] || { echo "clients.sh: no coordd at $COORD_BROKER (ninja -C build)" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "clients.sh: apt-get install redis-server" >&2; exit 1; }
/usr/bin/python3 -c 'import redis' 2>/dev/null || { echo "clients.sh: apt-get install python3-redis" >&2; exit 1; }
[ -d "$repo/client/node/node_modules/ioredis" ] ||
    { echo "clients.sh: ioredis missing: (cd client/node && npm ci)" >&2; exit 1; }

ncpu=$(nproc)
json=()
for pl in "${placements[@]}"; do
    case "$pl" in
        same) pin=(taskset -c 1); srv=(--server-cpu 1) ;;
        split) pin=(taskset -c 0); srv=(--server-cpu 1) ;;
        none) pin=(); srv=() ;;
        *) echo "clients.sh: placement same, split or none" >&2; exit 2 ;;
    esac
    if [ "$pl" != none ] && [ "$ncpu" -lt 2 ]; then
        echo "clients.sh: placement $pl needs 2 CPUs: skipped" >&2
        continue
    fi
    out=$(cd "$repo/client/node" &&
          ${pin[@]+"${pin[@]}"} node bench/vs-ioredis.js --seconds "$seconds" --rounds "$rounds" \
              ${srv[@]+"${srv[@]}"} | tail -n 1)
    json+=("{\"placement\":\"$pl\",\"r\":$out}")
    while IFS= read -r line; do
        json+=("{\"placement\":\"$pl\",\"r\":$line}")
    done < <(${pin[@]+"${pin[@]}"} /usr/bin/python3 "$repo/client/python/bench_vs_redis.py" \
                 --seconds "$seconds" --rounds "$rounds" ${srv[@]+"${srv[@]}"} | grep '^{')
done

lines=$(printf '%s\n' "${json[@]}")
/usr/bin/python3 - "$lines" <<'EOF'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
peer = {"node": "ioredis", "python-sync": "redis-py Lock", "python-asyncio": "redis.asyncio Lock"}
print("| placement | client | coord cycles/s | peer | peer cycles/s | ratio (min-max) "
      "| CPU us/cycle, client + server: coord / peer |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for row in rows:
    r, c = row["r"], row["r"]["cpu_us"]
    f = lambda v: "-" if v is None else f"{v:.1f}"
    print(f"| {row['placement']} | {r['lang']} | {r['coord']:,.0f} | {peer.get(r['lang'], '?')} "
          f"| {r['peer']:,.0f} | **{r['ratio']:.2f}x** ({r['min']:.2f}-{r['max']:.2f}) "
          f"| {f(c['coord_client'])} + {f(c['coord_server'])} / "
          f"{f(c['peer_client'])} + {f(c['peer_server'])} |")
EOF
printf '%s\n' "$lines"
