#!/usr/bin/env bash
# The C ABI's CI checks (called from .ci/run): the header is current, the
# shared library exports only rstat_* functions, the C tests pass under
# AddressSanitizer and UndefinedBehaviorSanitizer, the README's example is
# examples/example.c byte for byte, builds through pkg-config (shared and
# static) and prints what the README shows, and the call-sequence fuzz
# target runs for a bounded number of cases.
set -euo pipefail
crate=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$crate/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
prefix=$target/capi-prefix
out=$target/capi-tests
mkdir -p "$out"
cd "$root"

# A block of the README's "From C" section: `code` is its first ```c
# block (the program), `output` the first ```text block after that (what
# the program prints).
readme_block() {
  awk -v want="$1" '
    /^##+ / { sec = ($0 ~ /^##+ From C/) }
    !sec { next }
    inside && $0 == "```" { inside = 0; if (printing) exit; next }
    inside { if (printing) print; next }
    /^```/ {
      inside = 1
      if ($0 == "```c" && !code_seen) { code_seen = 1; printing = (want == "code") }
      else if ($0 == "```text" && code_seen && want == "output") printing = 1
    }
  ' "$root/README.md"
}
echo "--- the README's C example is examples/example.c"
if [ -z "$(readme_block code)" ]; then
  echo "README.md has no \`\`\`c block in its \"## From C\" section"; exit 1
fi
if ! diff -u --label crates/rstat-capi/examples/example.c --label "README.md (From C)" \
  "$crate/examples/example.c" <(readme_block code); then
  echo "README.md's C example (above, +) differs from crates/rstat-capi/examples/example.c (-);"
  echo "copy the file into the README's \`\`\`c block (or the other way round)"; exit 1
fi

echo "--- header: regenerate include/rstat.h with cbindgen and compare"
cargo test -q -p rstat-capi --test header
RUSTDOCFLAGS="-D warnings" cargo doc -q --no-deps -p rstat-capi

echo "--- build and install into $prefix"
"$crate/scripts/install.sh" "$prefix" release
so=$prefix/lib/librstat.so

echo "--- exports: only rstat_* functions (nm -D --defined-only)"
# Defined dynamic symbols: the version node RSTAT_0 (type A) and functions
# (type T) named rstat_*; anything else (data, another prefix) fails.
bad=$(nm -D --defined-only "$so" | awk '!(($2 == "T" && $3 ~ /^rstat_[a-z0-9_]+@@RSTAT_0$/) || ($2 == "A" && $3 == "RSTAT_0"))')
if [ -n "$bad" ]; then
  echo "librstat.so exports symbols other than rstat_* functions:"; echo "$bad"; exit 1
fi
exported=$(nm -D --defined-only "$so" | awk '$2 == "T" { sub(/@@.*/, "", $3); print $3 }' | sort)
declared=$(grep -oE '^[a-z_0-9 *]+ \**(rstat_[a-z0-9_]+)\(' "$crate/include/rstat.h" | grep -oE 'rstat_[a-z0-9_]+\($' | tr -d '(' | sort)
if [ "$exported" != "$declared" ]; then
  echo "exported and declared functions differ:"; diff <(echo "$declared") <(echo "$exported") || true; exit 1
fi
echo "$(echo "$exported" | wc -l) functions exported, all declared in rstat.h, nothing else"
# (grep -q reads a captured string: with pipefail, a writer cut off by
# grep's early exit would fail the pipeline.)
grep -q 'SONAME.*librstat.so.0' <<< "$(readelf -d "$so")" || { echo "soname is not librstat.so.0"; exit 1; }
for f in $declared; do
  grep -q "$f(" "$crate/tests/c/test_capi.c" || { echo "tests/c/test_capi.c never calls $f"; exit 1; }
done

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cflags="-std=c11 -Wall -Wextra -Werror -g"
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# shellcheck disable=SC2046
# Exactly the README's flags: rstat.pc's rpath must be enough to run.
link() { echo $(pkg-config --cflags --libs rstat); }

echo "--- C tests under ASan + UBSan, against the shared library"
# shellcheck disable=SC2046,SC2086
cc $cflags $san -I"$crate/tests/c" -o "$out/test_capi" "$crate/tests/c/test_capi.c" $(link)
# shellcheck disable=SC2046,SC2086
cc $cflags $san -pthread -I"$crate/tests/c" -o "$out/test_threads" "$crate/tests/c/test_threads.c" $(link)
grep -q "librstat.so.0 => $prefix/lib/" <<< "$(ldd "$out/test_capi")" || { echo "test_capi is not linked to the shared library"; exit 1; }
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 "$out/test_capi"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 "$out/test_threads"

echo "--- the README's example, through pkg-config: shared, then static"
# shellcheck disable=SC2046,SC2086
cc $cflags -o "$out/example" "$crate/examples/example.c" $(link)
"$out/example" > "$out/example.out"
cat "$out/example.out"
grep -q "tenant-a: requests 1, bytes_out 1500" "$out/example.out"
if ! diff -u --label "README.md (From C, output)" --label "example's output" \
  <(readme_block output) "$out/example.out"; then
  echo "the example's output (+) differs from the README's (-): update the README's output block"; exit 1
fi
# shellcheck disable=SC2046,SC2086
cc $cflags -o "$out/example-static" "$crate/examples/example.c" \
  $(pkg-config --cflags rstat) "$prefix/lib/librstat.a" $(pkg-config --static --libs-only-l rstat | sed 's/-lrstat //')
"$out/example-static" | cmp - "$out/example.out"
if grep -q librstat <<< "$(ldd "$out/example-static")"; then echo "example-static links librstat.so"; exit 1; fi

echo "--- the header from C++ (extern \"C\", nullptr handles)"
printf '#include "rstat.h"\nint main() { rstat *rs = nullptr; int rc = rstat_new(nullptr, &rs);\n  return rc == 0 ? rstat_free(rs) : 1; }\n' > "$out/cxx_smoke.cc"
# shellcheck disable=SC2046
c++ -std=c++11 -Wall -Wextra -Werror -o "$out/cxx_smoke" "$out/cxx_smoke.cc" $(link)
"$out/cxx_smoke"

echo "--- fuzz: random call sequences with random, stale and foreign handles (bounded)"
PROPTEST_CASES=${RSTAT_CAPI_FUZZ_CASES:-1000} cargo test -q -p rstat-capi --test fuzz
