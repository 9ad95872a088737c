#!/usr/bin/env bash
# Run benchmarks of two revisions side by side: each benchmark script alternates between the
# baseline revision (its own checkout and its own benchmark script) and the working tree, ROUNDS times,
# so both see the same machine state.  Usage: benchmarks/side_by_side.sh BASE_REV [ROUNDS] [bench ...]
# e.g.  benchmarks/side_by_side.sh 58b6a74 2 bench_plan bench_restore bench_webdataset
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?give the baseline revision}; rounds=${2:-2}; shift $(( $# >= 2 ? 2 : 1 ))
benches=("$@"); [ ${#benches[@]} -gt 0 ] || benches=(bench_plan bench_restore bench_webdataset)
tree=$(mktemp -d); trap 'git worktree remove --force "$tree" >/dev/null 2>&1 || true' EXIT
git worktree add --detach "$tree" "$base" >/dev/null
py=${PY:-.venv/bin/python}
for bench in "${benches[@]}"; do
  for round in $(seq "$rounds"); do
    echo "== $bench round $round: baseline $base"
    PYTHONPATH="$tree/src" "$py" "$tree/benchmarks/$bench.py"
    echo "== $bench round $round: working tree $(git rev-parse --short HEAD)"
    PYTHONPATH="$PWD/src" "$py" "benchmarks/$bench.py"
  done
done
