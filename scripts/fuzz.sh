#!/usr/bin/env bash
# Runs every libFuzzer target of a sanitizer build (make fuzz) for SECONDS each, from the seeds
# committed in fuzz/corpus/NAME plus what earlier runs found ($BUILD/corpus/NAME). A crash, a
# sanitizer report, a timeout (10 s for one input) or a leak is a finding: its input is kept as
# $BUILD/findings/NAME/crash-* and the script exits 1 after running the rest.
# Prints one line per target: executions, executions per second, coverage (edges) and features.
set -uo pipefail
build=${1:?usage: fuzz.sh BUILD SECONDS [TARGET...]}
seconds=${2:-60}
shift 2 || shift $#
# Targets named on the command line (fuzz_idx ...), or every fuzz_* of the build.
if [ $# -gt 0 ]; then targets=("${@/#/$build/}"); else targets=("$build"/fuzz_*); fi
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
printf '%-20s %12s %10s %8s %8s  %s\n' target executions exec/s cov ft result
for bin in "${targets[@]}"; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  corpus="$build/corpus/$name"
  findings="$build/findings/$name"
  mkdir -p "$corpus" "$findings"
  log="$build/corpus/$name.log"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  OMP_NUM_THREADS=1 "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$findings/" "$corpus" "$root/fuzz/corpus/$name" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  if [ $rc -eq 0 ]; then result=ok; else result="FINDING (exit $rc, see $log)"; status=1; fi
  printf '%-20s %12s %10s %8s %8s  %s\n' "$name" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$result"
  if [ $rc -ne 0 ]; then grep -E 'ERROR|finding|SUMMARY|runtime error' "$log" | head -5; fi
done
exit $status
