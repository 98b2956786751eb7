#!/usr/bin/env bash
# Build times of a revision on this machine, each in a fresh target directory:
#   scripts/build-times.sh [REV] [RUN_FILE] [REPORT_FILE]
# prints the load average, a clean release build, and the release rebuild after touching a file
# in run/ and one in report/ (their paths in REV's tree). REV defaults to HEAD.
set -euo pipefail
rev=${1:-HEAD}
run_file=${2:-src/run/launch.rs}
report_file=${3:-crates/report/src/report/mod.rs}
repo=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$repo" worktree add -q --detach "$work/tree" "$rev"
cd "$work/tree"
export CARGO_TARGET_DIR="$work/target"
seconds() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1; awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }'; }
echo "$rev: load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "clean release build: $(seconds cargo build --release) s"
touch "$run_file"
echo "release after touching $run_file: $(seconds cargo build --release) s"
touch "$report_file"
echo "release after touching $report_file: $(seconds cargo build --release) s"
