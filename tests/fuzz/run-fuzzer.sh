#!/bin/sh
# run-fuzzer.sh - runs the libFuzzer binary on a work corpus under the build dir, seeded from the repo's corpus.
# usage: run-fuzzer.sh FUZZER WORKDIR SEED_CORPUS [libFuzzer flags...]
#   WORKDIR/corpus receives the seeds (copied) and every new input the
#   fuzzer finds; WORKDIR/artifacts receives crashes.  The repo's seed
#   corpus is only read.
set -eu
if [ $# -lt 3 ]; then
    echo "usage: $0 FUZZER WORKDIR SEED_CORPUS [libFuzzer flags...]" >&2
    exit 2
fi
fuzzer=$1 work=$2 seeds=$3
shift 3
mkdir -p "$work/corpus" "$work/artifacts"
cp "$seeds"/* "$work/corpus/"
# libFuzzer exits 77 on a finding by default, which meson reads as SKIP:
# ask for 1, and map a stray 77 to 1 as well.
rc=0
"$fuzzer" -artifact_prefix="$work/artifacts/" -error_exitcode=1 \
    -timeout_exitcode=1 "$@" "$work/corpus" || rc=$?
[ "$rc" -eq 77 ] && rc=1
if [ "$rc" -ne 0 ]; then
    echo "run-fuzzer.sh: the fuzzer failed (exit $rc); inputs in $work/artifacts:" >&2
    ls -l "$work/artifacts" >&2
fi
exit "$rc"
