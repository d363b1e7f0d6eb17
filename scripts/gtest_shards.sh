#!/usr/bin/env bash
# Runs a GoogleTest binary as N shards in parallel (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX), each
# shard's log in LOGDIR/shard-K.log, with the extra arguments (a --gtest_filter) given to every
# shard. Prints each shard's summary, the log tail of a shard that failed, and a closing line
# "N passed, M failed" over all shards; exits 1 when any shard failed or ran no test.
# usage: gtest_shards.sh BINARY SHARDS LOGDIR [ARGS...]
set -uo pipefail
bin=${1:?usage: gtest_shards.sh BINARY SHARDS LOGDIR [ARGS...]}
shards=${2:?shards}
logdir=${3:?logdir}
shift 3
mkdir -p "$logdir"
pids=()
for ((k = 0; k < shards; ++k)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$k "$bin" "$@" >"$logdir/shard-$k.log" 2>&1 &
  pids+=($!)
done
status=0 passed=0 failed=0
for ((k = 0; k < shards; ++k)); do
  wait "${pids[$k]}"
  rc=$?
  log="$logdir/shard-$k.log"
  p=$(grep -o '^\[  PASSED  \] [0-9]*' "$log" | grep -o '[0-9]*$' || true)
  f=$(grep -o '^\[  FAILED  \] [0-9]* test' "$log" | grep -o '[0-9]*' || true)
  passed=$((passed + ${p:-0})) failed=$((failed + ${f:-0}))
  echo "$(basename "$bin") shard $k of $shards: exit $rc, ${p:-0} passed, ${f:-0} failed ($log)"
  if [ $rc -ne 0 ] || [ -z "$p" ]; then
    status=1
    [ -n "$f" ] || failed=$((failed + 1))  # killed by a sanitizer report: the test it was in failed
    tail -n 40 "$log"
  fi
done
[ $passed -gt 0 ] || status=1
echo "$passed passed, $failed failed"
exit $status
