#!/usr/bin/env bash
# Runs the real-engine tier N times in a row, each a fresh test process with fresh servers
# (issue 35 item 16: a real-engine test is called stable after 20 runs in a row).
#
#   scripts/real-engines/loop.sh [N] [OUT]      (N=20, OUT=target/tier-loop)
#
# Builds the integration tests once, then runs `integration real_engine::` N times: OUT/run-I.log
# per run, OUT/summary.txt a line each (exit code, seconds, load average, test result), and a
# failed run's temporary files (its kept workspaces: specs, run directories, server logs) moved
# to OUT/failed-I. Beside it, an SGLang launcher that has run 90 s without its HTTP server up gets
# its Python stacks dumped to OUT/hangs (py-spy, when `py-spy` is on the PATH).
set -uo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-20}
out=$(realpath -m "${2:-target/tier-loop}")
mkdir -p "$out/tmp" "$out/hangs"
bin=$(cargo test --test integration --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="integration":
        print(m["executable"])' | tail -1)
[ -x "$bin" ] || { echo "could not build the integration tests" >&2; exit 1; }

watch_hangs() {
  command -v py-spy >/dev/null || return
  while true; do
    for pid in $(pgrep -f "sglang.launch_server"); do
      age=$(ps -o etimes= -p "$pid" 2>/dev/null | tr -d ' ')
      [ -n "$age" ] && [ "$age" -ge 90 ] || continue
      log=$(readlink "/proc/$pid/fd/1" 2>/dev/null)
      [ -f "$log" ] || continue
      grep -q "Uvicorn running\|fired up\|Started server process" "$log" && continue
      dump="$out/hangs/hang-$pid.txt"
      [ -f "$dump" ] && continue
      { date; echo "pid $pid, $age s, log $log"; cp "$log" "$out/hangs/log-$pid.txt"
        for p in $pid $(pgrep -P "$pid"); do echo "=== $p"; timeout 30 py-spy dump --nonblocking --pid "$p" 2>&1; done
      } > "$dump"
    done
    sleep 10
  done
}
watch_hangs &
watcher=$!
trap 'kill $watcher 2>/dev/null' EXIT

for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  SERVEBENCH_REAL_ENGINES=required TMPDIR="$out/tmp" "$bin" real_engine:: > "$out/run-$i.log" 2>&1
  rc=$?
  echo "run $i rc=$rc $(( $(date +%s) - start ))s load=$(cut -d' ' -f1-3 /proc/loadavg) $(grep -E '^test result' "$out/run-$i.log")" >> "$out/summary.txt"
  if [ $rc -ne 0 ]; then
    mkdir -p "$out/failed-$i" && mv "$out/tmp"/* "$out/failed-$i/" 2>/dev/null
  fi
  rm -rf "${out:?}/tmp"/*
done
[ -f "$out/summary.txt" ] || exit 0
cat "$out/summary.txt"
# Exits 1 when any run failed.
! grep -q ' rc=[1-9]' "$out/summary.txt"
