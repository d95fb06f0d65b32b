#!/usr/bin/env bash
# test-install.sh - the install test (meson test install, suite 'install').
#
#   test-install.sh BUILD_DIR SOURCE_DIR PREFIX SANITIZE
#
# `meson install --destdir` into a temp dir, then, from what was installed
# only: a program built with the installed libcoord.pc (shared, and static
# with its private libraries) connects to the installed coordd and runs a
# flight; coordctl talks to it; headers, man pages and the systemd user units
# are where they belong (PREFIX/share/systemd/user, a directory that
# `systemctl --user` searches); the Node.js package installs from the tree
# with `npm pack` + `npm install --offline` into an empty npm cache of its
# own (its one dependency packed from client/node/node_modules, which
# `npm ci` filled from the lockfile: nothing is asked of the registry or of
# the user's cache), the Python package with
# `pip install --no-deps --no-build-isolation --no-index` (skipped, and said
# so, when pip is missing).  No network.
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd); prefix=$3; sanitize=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/coord-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/dest; root=$dest$prefix
fail() { echo "install test: $*" >&2; exit 1; }
step() { echo "== $*"; }
with_broker() { /usr/bin/python3 "$src/tests/with-broker.py" --coordd "$root/bin/coordd" "$@"; }

step "meson install --destdir"
meson install -C "$build" --no-rebuild --quiet --destdir "$dest" >/dev/null
for f in bin/coordd bin/coordctl include/coord.h include/coord-uv.h include/coord-codes.h \
         share/man/man8/coordd.8 share/man/man1/coordctl.1 share/man/man3/libcoord.3; do
    [ -e "$root/$f" ] || fail "$prefix/$f was not installed"
done
[ -f "$root/share/bash-completion/completions/coordctl" ] && [ -f "$root/share/zsh/site-functions/_coordctl" ] ||
    fail "the shell completions were not installed"
[ -f "$root/share/doc/coord/PROTOCOL.md" ] || fail "PROTOCOL.md, which the man pages point to, was not installed"
# `man coord_once`: one link page per function of the installed headers
for fn in $(/usr/bin/python3 "$src/man/links.py" "$root/include/coord.h" "$root/include/coord-uv.h"); do
    [ "$(readlink "$root/share/man/man3/$fn.3")" = libcoord.3 ] ||
        fail "no man page link $fn.3 -> libcoord.3 (reconfigure the build: meson setup --reconfigure)"
done
if command -v man >/dev/null; then
    man -M "$root/share/man" -w coord_once >/dev/null 2>&1 || fail "man coord_once finds nothing"
fi
pc=$(find "$root" -name coord.pc -path '*/pkgconfig/*' | head -1)
[ -n "$pc" ] || fail "no coord.pc installed"
libdir=$(dirname "$(dirname "$pc")")
echo "coord.pc: ${pc#"$dest"}"

step "a program built with the installed pkg-config file"
# the installed .pc first; the sysroot puts its -I and -L under the destdir
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$dest
pkg-config --exists --print-errors coord
[ "$(pkg-config --variable=pcfiledir coord)" = "$(dirname "$pc")" ] || fail "pkg-config found another coord.pc"
[ "$(pkg-config --modversion coord)" = "$(sed -n "s/^ *version: '\(.*\)',$/\1/p" "$src/meson.build" | head -1)" ] ||
    fail "coord.pc version $(pkg-config --modversion coord) is not the project's"
san=()
[ "$sanitize" = none ] || san=(-fsanitize="$sanitize")
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror "${san[@]}" "$src/tests/install/hello.c" -o "$work/hello" \
    $(pkg-config --cflags --libs coord)
export LD_LIBRARY_PATH=$libdir
libs=$(ldd "$work/hello")          # (not piped into grep -q: pipefail and SIGPIPE)
[[ $libs == *"$libdir/libcoord.so"* ]] || fail "hello does not use the installed libcoord.so: $libs"
# libcoord.a with the (shared) libraries its Requires.private names
# shellcheck disable=SC2046
# libcoord(3) "Static linking": libcoord.a, its dependencies shared
# (pkg-config --static names libcurl's chain, which Debian has no .a of)
cc -std=c11 -Wall -Wextra -Werror "${san[@]}" "$src/tests/install/hello.c" -o "$work/hello-static" \
    $(pkg-config --cflags coord) "$(pkg-config --variable=libdir coord)/libcoord.a" \
    $(pkg-config --libs msgpack libcrypto libcurl jansson) -pthread
with_broker --expect '^flight: hello from libcoord \(ran here\)$' -- "$work/hello"
with_broker --expect '^flight: hello from libcoord \(ran here\)$' -- "$work/hello-static"
with_broker --expect '^broker +coord ' -- "$root/bin/coordctl" status

step "systemd user units"
unitdir=$prefix/share/systemd/user
units=$dest$unitdir
[ -f "$units/coordd.socket" ] && [ -f "$units/coordd.service" ] || fail "no units in $unitdir"
grep -qx "ExecStart=$prefix/bin/coordd --foreground --socket %t/coord/broker.sock \$COORDD_OPTS" "$units/coordd.service" ||
    fail "coordd.service does not start $prefix/bin/coordd"
if command -v systemd-analyze >/dev/null; then
    paths=$(systemd-analyze --user unit-paths 2>/dev/null || true)
    grep -qx "$unitdir" <<<"$paths" ||
        fail "$unitdir is not searched by systemctl --user"
    echo "systemctl --user searches $unitdir"
    # a user's own prefix: ~/.local/share/systemd/user ($XDG_DATA_HOME)
    grep -qx "${XDG_DATA_HOME:-$HOME/.local/share}/systemd/user" <<<"$paths" ||
        fail "${XDG_DATA_HOME:-$HOME/.local/share}/systemd/user is not searched by systemctl --user"
else
    echo "SKIP: no systemd-analyze to ask where systemctl --user looks"
fi

step "the Node.js package, from the tree, offline"
if command -v npm >/dev/null && command -v node >/dev/null; then
    mkdir "$work/node"
    export npm_config_cache="$work/npm-cache"       # empty: proves nothing is cached
    tgz=$(cd "$src/client/node" && npm pack --silent --pack-destination "$work/node" 2>/dev/null | tail -1)
    [ -f "$work/node/$tgz" ] || fail "npm pack made no tarball"
    tar tzf "$work/node/$tgz" >"$work/node/files"
    grep -qx 'package/LICENSE' "$work/node/files" || fail "the npm tarball carries no LICENSE"
    dep="$src/client/node/node_modules/@msgpack/msgpack"
    [ -f "$dep/package.json" ] || fail "no $dep: run npm ci in client/node first"
    deptgz=$(cd "$dep" && npm pack --ignore-scripts --silent --pack-destination "$work/node" 2>/dev/null | tail -1)
    [ -f "$work/node/$deptgz" ] || fail "npm pack of @msgpack/msgpack made no tarball"
    (cd "$work/node" && echo '{"name":"app","private":true,"type":"module"}' > package.json &&
     npm install --offline --no-audit --no-fund --loglevel=error "./$deptgz" "./$tgz" >/dev/null) ||
        fail "npm install --offline of $tgz (with $deptgz) failed from an empty npm cache"
    cat > "$work/node/app.mjs" <<'JS'
import { connect } from 'coord-client';
const c = await connect({ autostart: false });
const r = await c.once('install-node', () => 'hello from node');
console.log(`node flight: ${r.value} (${r.source})`);
await c.close();
JS
    with_broker --expect '^node flight: hello from node \(owner\)$' -- node "$work/node/app.mjs"
else
    echo "SKIP: no npm/node here: the Node.js package was not tried"
fi

step "the Python package, from the tree, offline, into a venv (the README's way: PEP 668)"
if /usr/bin/python3 -m venv --system-site-packages "$work/venv" >/dev/null 2>&1; then
    cp -r "$src/client/python" "$work/pysrc"        # pip builds in the source dir: not in the tree
    rm -rf "$work/pysrc/build" "$work/pysrc"/src/*.egg-info
    "$work/venv/bin/python" -m pip install --quiet --no-build-isolation --no-index \
        --disable-pip-version-check --root-user-action=ignore "$work/pysrc" >/dev/null ||
        fail "pip install of client/python into a venv failed"
    site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    [ -f "$site/coord/__init__.py" ] && [ -f "$site/coord/py.typed" ] || fail "pip installed no coord package"
    [ -f "$site/coord-0.1.0.dist-info/LICENSE" ] || fail "the wheel carries no LICENSE"
    with_broker --expect '^python flight: hello from python \(owner\)$' -- \
        "$work/venv/bin/python" -c 'import coord
with coord.Client(autostart=False) as c:
    r = c.once("install-py", lambda f: b"hello from python")
    print(f"python flight: {bytes(r).decode()} ({r.source})")'
else
    echo "SKIP: /usr/bin/python3 has no venv module (apt-get install python3-venv): the Python package was not tried"
fi
echo "install test: ok"
