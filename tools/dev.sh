#!/usr/bin/env bash
# tools/dev.sh - the developer entry point: install Debian deps if missing, build in ./build, then run the demo or the tests.
#
#   tools/dev.sh demo [ARGS...]   build, then run the demo
#   tools/dev.sh test [ARGS...]   build, then `meson test` (ARGS go to meson test)
#   tools/dev.sh build            install deps and build only
#   tools/dev.sh install [PREFIX] build, then install into PREFIX (default
#                                 ~/.local: bin on PATH, man, systemd units)
#   tools/dev.sh deps             install deps only
#
# Environment:
#   BUILD_DIR      build directory (default: build, relative to the repo root)
#   MESON_ARGS     extra `meson setup` options, used when the dir is created
#   COORD_NO_APT=1 never call apt-get (just report what is missing)
#
# Works from any directory; as root it needs no sudo, otherwise it uses sudo
# for apt-get only.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
BUILD_DIR="${BUILD_DIR:-build}"
PKGS=(meson ninja-build pkg-config gcc libuv1-dev libmsgpack-dev liblmdb-dev
      libssl-dev libcurl4-openssl-dev libjansson-dev
      python3-msgpack python3-pytest
      mypy            # the Python client's API is checked with mypy --strict (test_api.py)
      python3-venv    # the install test installs the Python package as the README says
      python3-prometheus-client tmux   # cli-observe: a real metrics parser, a real terminal
      mandoc          # the man pages' lint test
      redis-server python3-redis   # coord-bench's peers (redis, clients: redis-py)
      etcd-server)    # the etcd ledger's tests run real etcd servers (else SKIP)

say() { printf 'dev.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

usage() {
    sed -n '4,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# Packages of PKGS not installed (dpkg-query is fast; apt-get only if needed).
missing_pkgs() {
    local p
    for p in "${PKGS[@]}"; do
        if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null |
                grep -q 'install ok installed'; then
            printf '%s\n' "$p"
        fi
    done
}

# The Node.js client's one dependency, from its lockfile (node itself comes
# with the machine; Debian 12's nodejs is too old for it).
node_deps() {
    [ -f client/node/package-lock.json ] || return 0
    if ! command -v npm >/dev/null 2>&1; then
        say "npm not found: the Node.js client's tests will not run"
        return 0
    fi
    if [ ! -d client/node/node_modules ] ||
       [ client/node/package-lock.json -nt client/node/node_modules ]; then
        say "npm ci in client/node"
        (cd client/node && npm ci --no-audit --no-fund --loglevel=error) ||
            die "npm ci failed in client/node"
        touch client/node/node_modules
    fi
}

install_deps() {
    node_deps
    if ! command -v dpkg-query >/dev/null 2>&1; then
        say "not a Debian-like system: install meson, ninja, pkg-config, a C compiler,"
        say "libuv, msgpack-c (4.x), LMDB, OpenSSL (libcrypto), libcurl and jansson"
        say "development files yourself"
        return 0
    fi
    local missing
    missing="$(missing_pkgs)"
    [ -z "$missing" ] && return 0
    # shellcheck disable=SC2086
    set -- $missing
    if [ "${COORD_NO_APT:-0}" = 1 ]; then
        die "missing packages: $* (COORD_NO_APT=1, not installing)"
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 ||
            die "missing packages: $*; run as root or install sudo"
        sudo=(sudo)
    fi
    say "installing: $*"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get update -qq -o Acquire::Retries=3 </dev/null
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends -o Acquire::Retries=3 "$@" </dev/null
}

build() {
    if [ ! -f "$BUILD_DIR/meson-private/coredata.dat" ]; then
        # shellcheck disable=SC2086
        meson setup "$BUILD_DIR" ${MESON_ARGS:-}
    fi
    # ninja re-runs meson by itself when a meson.build changed
    ninja -C "$BUILD_DIR"
}

# Installs the build into PREFIX (default ~/.local, no root needed): coordd
# and coordctl in PREFIX/bin (on Debian's PATH once ~/.local/bin exists, from
# the next login: ~/.profile adds it), the man pages where man finds them
# from PATH, the systemd user units where systemctl --user looks, and the
# shell completions where bash-completion and zsh look.
install_user() {
    local prefix="${1:-$HOME/.local}"
    build
    meson configure "$BUILD_DIR" --prefix="$prefix" >/dev/null
    ninja -C "$BUILD_DIR" >/dev/null
    meson install -C "$BUILD_DIR" --quiet
    say "installed into $prefix"
    case ":$PATH:" in
        *":$prefix/bin:"*) ;;
        *) say "$prefix/bin is not on PATH yet: log in again, or: export PATH=\"$prefix/bin:\$PATH\"" ;;
    esac
    say "try: coordctl status; man coordctl; systemctl --user enable --now coordd.socket"
}

demo() {
    if [ -x "$BUILD_DIR/tools/coord-demo" ]; then
        exec "$BUILD_DIR/tools/coord-demo" "$@"
    fi
    if [ -f tools/demo.sh ]; then
        BUILD_DIR="$BUILD_DIR" exec bash tools/demo.sh "$@"
    fi
    say "the broker demo is not there yet (no $BUILD_DIR/tools/coord-demo, no tools/demo.sh)."
    if [ -x "$BUILD_DIR/broker/coordd" ]; then
        say "starting the broker in the foreground instead; stop it with Ctrl-C:"
        say "  $BUILD_DIR/broker/coordd --foreground $*"
        exec "$BUILD_DIR/broker/coordd" --foreground "$@"
    fi
    die "and $BUILD_DIR/broker/coordd is not built yet either"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    deps)  install_deps ;;
    build) install_deps; build ;;
    test)  install_deps; build; meson test -C "$BUILD_DIR" --print-errorlogs "$@" ;;
    demo)  install_deps; build; demo "$@" ;;
    install) install_deps; install_user "$@" ;;
    -h|--help|help) usage ;;
    *)     usage ;;
esac
