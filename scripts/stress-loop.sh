#!/usr/bin/env bash
# Run every multi-threaded test binary of rstat N times (default 200) and
# report the failure count per binary. A flaky test shows up here long
# before it shows up in CI.
#
#   scripts/stress-loop.sh [N]
#
# Environment: RSTAT_STRESS_SECS (default 0.05) shortens the time-bounded
# stress tests so a loop of 200 stays in minutes; LOOP_LOG (default
# target/stress-loop) keeps the output of every failed run.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-200}"
export RSTAT_STRESS_SECS="${RSTAT_STRESS_SECS:-0.05}"
log="${LOOP_LOG:-target/stress-loop}"
mkdir -p "$log"

# Test binaries that start threads (the library's unit tests include the
# page_counter, memory and percpu_ref stress tests).
targets=(lib engine exact_while_running percpu_ref_stress periodic policy stress)
for t in reclaim_protection attach attach_cpu attach_async attach_sampled alloc_system alloc_lifecycle no_cpu_id; do
  [ -f "crates/rstat/tests/$t.rs" ] && targets+=("$t")
done

args=()
for t in "${targets[@]}"; do
  if [ "$t" = lib ]; then args+=(--lib); else args+=(--test "$t"); fi
done
# Build once and learn each binary's path.
mapfile -t bins < <(cargo test -q -p rstat "${args[@]}" --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"] + " " + m["executable"])
')

total=0
start=$(date +%s)
for entry in "${bins[@]}"; do
  name="${entry%% *}"; bin="${entry#* }"
  fails=0
  for i in $(seq "$n"); do
    if ! "$bin" -q >"$log/$name.out" 2>&1; then
      fails=$((fails + 1))
      cp "$log/$name.out" "$log/$name.fail.$i"
    fi
  done
  printf '%-22s %d runs, %d failed\n' "$name" "$n" "$fails"
  total=$((total + fails))
done
echo "total failures: $total (RSTAT_STRESS_SECS=$RSTAT_STRESS_SECS, $(( $(date +%s) - start )) s, $(nproc) CPUs)"
[ "$total" -eq 0 ]
