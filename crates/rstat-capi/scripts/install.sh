#!/usr/bin/env bash
# Build rstat's C library and install it under PREFIX:
#   PREFIX/include/rstat.h
#   PREFIX/lib/librstat.a                       (the static library)
#   PREFIX/lib/librstat.so.0.<minor>.0, librstat.so.0, librstat.so
#   PREFIX/lib/pkgconfig/rstat.pc               (pkg-config --cflags --libs rstat)
#
# Any PREFIX works without root and without LD_LIBRARY_PATH: rstat.pc's
# link flags carry an rpath to PREFIX/lib, so a program linked with
# `pkg-config --libs rstat` finds librstat.so.0 where it was installed.
# Run as root, the script also refreshes the dynamic linker's cache
# (ldconfig), for programs linked without pkg-config when PREFIX/lib is a
# system library directory (/usr/local/lib on Debian).
#
# The shared library is linked here from the static one with rstat.map as
# the only version script, so the script alone decides what is exported:
# the rstat_* functions under the version node RSTAT_0. (A cargo cdylib adds
# rustc's own export list, which takes precedence over a second script.)
#
# usage: scripts/install.sh PREFIX [debug|release]   (default release)
set -euo pipefail
prefix=${1:?usage: install.sh PREFIX [debug|release]}
profile=${2:-release}
crate=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$crate/../.." && pwd)
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)

flag=--release
[ "$profile" = debug ] && flag=
# shellcheck disable=SC2086
cargo build $flag -p rstat-capi --manifest-path "$root/Cargo.toml"
target=${CARGO_TARGET_DIR:-$root/target}/$profile

# The system libraries Rust's standard library needs, as printed by
# `rustc --print native-static-libs` for this target.
private_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
minor=$(sed -n 's/^pub const RSTAT_ABI_VERSION_MINOR: u32 = \([0-9]*\);/\1/p' "$crate/src/engine.rs")

mkdir -p "$prefix/include" "$prefix/lib/pkgconfig"
install -m 644 "$crate/include/rstat.h" "$prefix/include/rstat.h"
install -m 644 "$target/librstat_capi.a" "$prefix/lib/librstat.a"
so="librstat.so.0.$minor.0"
# shellcheck disable=SC2086
${CC:-cc} -shared -o "$prefix/lib/$so" \
  -Wl,--whole-archive "$target/librstat_capi.a" -Wl,--no-whole-archive \
  -Wl,--version-script="$crate/rstat.map" -Wl,-soname,librstat.so.0 \
  -Wl,--gc-sections -Wl,-z,relro,-z,now $private_libs
ln -sf "$so" "$prefix/lib/librstat.so.0"
ln -sf librstat.so.0 "$prefix/lib/librstat.so"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@PRIVATE_LIBS@|$private_libs|" \
  "$crate/rstat.pc.in" > "$prefix/lib/pkgconfig/rstat.pc"
if [ "$(id -u)" = 0 ] && command -v ldconfig > /dev/null; then
  ldconfig
fi
echo "installed rstat $version (ABI 0.$minor) in $prefix"
