#!/usr/bin/env bash
# Runs both storage-engine benchmarks (Rust, then Python) from the repository root.
#
#   benches/run_all.sh            full runs (a few minutes, a few GiB of scratch files in /tmp)
#   benches/run_all.sh --quick    smoke runs (seconds)
#
# Results: bench-results/store_bench_rust.json and bench-results/store_bench_python.json.
# The Python benchmark uses the ferromq extension installed in the virtualenv (PYTHON, default
# .venv/bin/python); rebuild it after Rust changes: .venv/bin/pip install -q -e '.[test]'
set -euo pipefail
cd "$(dirname "$0")/.."

args=()
for a in "$@"; do
    case "$a" in
        --quick) args+=(--quick) ;;
        *) echo "usage: $0 [--quick]" >&2; exit 2 ;;
    esac
done

python=${PYTHON:-.venv/bin/python}
cargo run --release -q -p ferromq-store-bench -- "${args[@]}"
echo
"$python" benches/store_bench.py "${args[@]}"
