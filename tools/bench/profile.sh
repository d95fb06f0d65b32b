#!/bin/sh
# profile.sh - per-request profiles of coordd under a coord-bench load.
#
#   tools/bench/profile.sh MODE COORDD COORD-BENCH COORDCTL SCENARIO...
#
# MODE is callgrind (instructions per request: valgrind counts them, so the
# figure is free of the noise of a shared machine), strace (syscalls per
# request, strace -c -f) or perf (perf stat, where the kernel lets it).
# coordd runs in a temp dir; coord-bench --quick drives SCENARIO against
# it (--socket); the broker's own "requests" counter is the divisor.
set -eu
mode=$1 coordd=$2 bench=$3 ctl=$4
shift 4
tmp=$(mktemp -d /tmp/coord-prof-XXXXXX)
sock=$tmp/s.sock
case $mode in
callgrind) wrap="valgrind --tool=callgrind --callgrind-out-file=$tmp/cg.out" ;;
strace) wrap="strace -c -f -o $tmp/strace.out" ;;
perf) wrap="perf stat -o $tmp/perf.out -e task-clock,context-switches,instructions" ;;
*) echo "profile.sh: unknown mode $mode" >&2; exit 2 ;;
esac
$wrap "$coordd" --foreground --socket "$sock" --data-dir "$tmp/data" \
    --log-level warn --max-conns 100000 2>"$tmp/log" &
pid=$!
i=0
while [ ! -S "$sock" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
# count from here: start-up (LMDB open, dynamic linking) is no request's
[ "$mode" = callgrind ] && callgrind_control -z $pid >/dev/null
"$bench" --quick --socket "$sock" "$@" >"$tmp/bench.out" 2>&1 || true
stats=$("$ctl" --socket "$sock" --no-autostart --json stats)
req=$(echo "$stats" | sed -n 's/.*"requests_total":\([0-9]*\).*/\1/p')
bpid=$(echo "$stats" | sed -n 's/.*"pid":\([0-9]*\).*/\1/p')
# count to here: shutdown (exit handlers, the libraries' cleanup) is no
# request's either; the dump is taken before coordd is told to stop
[ "$mode" = callgrind ] && callgrind_control -d $pid >/dev/null
kill -TERM "$bpid"     # coordd itself, not the tool around it
wait $pid || true
echo "requests: $req"
case $mode in
callgrind)
    # the dump taken above (cg.out.1): up to the stats request
    [ -s "$tmp/cg.out.1" ] && mv "$tmp/cg.out.1" "$tmp/cg.out"
    ir=$(callgrind_annotate "$tmp/cg.out" 2>/dev/null | sed -n 's/^\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
    echo "instructions: $ir"
    echo "instructions per request: $((ir / req))"
    callgrind_annotate --inclusive=no "$tmp/cg.out" 2>/dev/null | sed -n '1,60p' >"$tmp/top.txt"
    echo "profile: $tmp/cg.out (top: $tmp/top.txt)" ;;
strace)
    calls=$(awk 'NR > 2 && $1 !~ /^-/ && $NF != "total" { n += $4 } END { print n }' "$tmp/strace.out")
    echo "syscalls: $calls"
    awk -v r="$req" 'NR > 2 && $NF != "total" && $1 !~ /^-/ {
        printf "  %-16s %8.3f per request\n", $NF, $4 / r }' \
        "$tmp/strace.out" | sort -k2 -nr | head -8
    echo "syscalls per request: $(awk -v c="$calls" -v r="$req" 'BEGIN { printf "%.3f", c / r }')" ;;
perf) cat "$tmp/perf.out" ;;
esac
echo "bench output: $tmp/bench.out"
