#!/usr/bin/env bash
# demo.sh - the main job of the quick start: a real coordd and a dozen
# processes coordinating through it, narrated.  Everything runs in a
# private temp dir; nothing touches the user's own broker.
#
#   tools/demo.sh [BUILD_DIR]        (default: build)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${BUILD_DIR:-$here/build}}
coordd=$build/broker/coordd
ctl=$build/tools/coordctl
for b in "$coordd" "$ctl"; do
    [ -x "$b" ] || { echo "demo: $b is missing: build first (tools/dev.sh build)" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/coord-demo.XXXXXX")
export COORD_SOCKET=$work/run/broker.sock COORD_DATA_DIR=$work/data COORD_BROKER=$coordd
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    [ -n "${broker:-}" ] && kill -TERM "$broker" 2>/dev/null && wait "$broker" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

bold=$(tput bold 2>/dev/null || true); plain=$(tput sgr0 2>/dev/null || true)
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }

say "starting coordd (socket $COORD_SOCKET)"
mkdir -p "$work/run" && chmod 700 "$work/run"
exec 3> >(sed -u 's/^/    [coordd] /' >&2)
"$coordd" --foreground --log-level info 2>&3 &
broker=$!
for _ in $(seq 100); do "$ctl" --no-autostart status >/dev/null 2>&1 && break; sleep 0.05; done
"$ctl" status

say "a watcher prints every lifecycle event the broker publishes"
"$ctl" --no-autostart watch -q > >(sed -u 's/^/    [watch] /') &
pids+=($!)
sleep 0.2

say "locks: 4 build steps want the same cache; they take turns (coordctl lock)"
for i in 1 2 3 4; do
    "$ctl" lock build-cache -- sh -c \
        'echo "    [step '"$i"'] filling the cache, fencing token $COORD_LOCK_TOKEN"; sleep 0.3' &
    pids+=($!)
done
wait "${pids[@]:1}" 2>/dev/null || true
pids=("${pids[0]}")

say "single-flight: 6 CLI invocations refresh one OAuth token; the backend sees 1 call (coordctl once)"
: > "$work/backend-calls"
for i in 1 2 3 4 5 6; do
    ( out=$("$ctl" once --keep 60 oauth-token -- sh -c \
            'echo call >> "'"$work"'/backend-calls"; sleep 1; echo "token-$(date +%s%N | tail -c 7)"')
      echo "    [cli $i] got $out" ) &
    pids+=($!)
done
wait "${pids[@]:1}" 2>/dev/null || true
pids=("${pids[0]}")
echo "    backend calls: $(wc -l < "$work/backend-calls")"
echo "    a 7th caller, later, reuses the stored record: $("$ctl" once --keep 60 oauth-token -- false)"

say "leadership: 3 workers want to drain the outbox; one leads at a time, each with a higher generation"
for i in 1 2 3; do
    "$ctl" leader-run --lease 2 outbox -- sh -c \
        'echo "    [worker '"$i"'] leading outbox as generation $COORD_GENERATION"; sleep 0.4' &
    pids+=($!)
done
wait "${pids[@]:1}" 2>/dev/null || true
pids=("${pids[0]}")
"$ctl" leader outbox | sed 's/^/    /'

say "channels: a subscriber hears what another process publishes"
"$ctl" --no-autostart subscribe -q settings > >(sed -u 's/^/    [subscriber] /') &
sub=$!
sleep 0.2
"$ctl" publish settings 'theme=dark' | sed 's/^/    [publisher] /'
sleep 0.2
kill "$sub" 2>/dev/null || true
wait "$sub" 2>/dev/null || true

say "introspection: what the broker counted"
"$ctl" stats | grep -E '^(connections|conns_accepted|requests_total|locks_[a-z]+|flights_[a-z]+|followers_joined|leaders_elected|messages_[a-z]+|records) ' | sed 's/^/    /'

say "done: stopping coordd with SIGTERM"
