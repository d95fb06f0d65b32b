#!/usr/bin/env bash
# demo.sh - runs the quick start's demo (tools/demo/demo.py) with a Python
# that has the Python client's one dependency (Debian's /usr/bin/python3 and
# python3-msgpack), against the build in BUILD_DIR (default: build).
#
#   tools/demo.sh [--keep] [--strict] [--build DIR]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || { echo "demo: python3 is needed" >&2; exit 1; }
build=${BUILD_DIR:-build}
case $build in /*) ;; *) build=$here/../$build ;; esac
exec "$py" "$here/demo/demo.py" --build "$build" "$@"
