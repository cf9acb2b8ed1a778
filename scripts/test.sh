#!/usr/bin/env bash
# Installs everything the tests need (a .venv with the package built from source, the test tools)
# and runs every check and test: Rust (fmt, clippy, cargo test) and Python (ruff, mypy, stubtest,
# pytest). Works on a fresh machine with only Python 3.11+, Rust and a C toolchain.
#
#   ./scripts/test.sh            everything (CI runs this)
#   ./scripts/test.sh --quick    the inner loop: no clippy or stub check, and only the unit and
#                                integration tests not marked slow, interop or spark (no Java, C++
#                                or Spark)
#   ./scripts/test.sh [--quick] [pytest args...]   e.g. -k transactions, or -n 0 for one process
#
# pytest runs in FERROMQ_TEST_WORKERS parallel workers (default 3; the tests wait on sockets and
# child JVMs as much as they compute); a module's tests stay on one worker (`--dist loadfile`: they
# share its module-scoped brokers, and some build on what an earlier one did).
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0
if [ "${1:-}" = "--quick" ]; then
    QUICK=1
    shift
fi
WORKERS=${FERROMQ_TEST_WORKERS:-3}

PYTHON=${PYTHON:-python3}
VENV=${FERROMQ_VENV:-.venv}

step() { printf '\n==> %s\n' "$*"; }

step "Python environment ($VENV)"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# Builds the Rust extension (release) through maturin and installs the test tools.
"$VENV/bin/python" -m pip install -q -e '.[test]'
# The official RocketMQ 5.x Python client gets an environment of its own, build/client5-venv, from
# pyproject's client5 extra (why: see there); the tests would make it on first use otherwise.
"$VENV/bin/python" -c 'import sys; sys.path.insert(0, "tools"); import apache_rocketmq as a; a.client5_python()'
# tests/integration/test_table_topics_s3.py runs a real S3-compatible server, versitygw, built from
# the Go module tools/s3server (pinned there) with the machine's Go; without Go those tests skip.
if command -v go >/dev/null; then
    step "S3-compatible server (versitygw) for the table topics' object-store tests"
    "$VENV/bin/python" tools/s3_server.py || echo "the S3 server could not be built: the S3 tests will be skipped"
else
    echo "Go is not installed: the S3 tests (tests/integration/test_table_topics_s3.py) will be skipped"
fi

if [ "$QUICK" = 0 ] && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
    # tests/integration/test_console.py drives the console in headless Chromium (Debian's package).
    step "Headless Chromium for the console's browser test"
    SUDO=""
    if [ "$(id -u)" != 0 ]; then SUDO="sudo -n"; fi
    if command -v apt-get >/dev/null && $SUDO apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null; then
        echo "installed $(command -v chromium)"
    else
        echo "could not install chromium with apt-get: the console's browser test will be skipped"
    fi
fi

if [ "$QUICK" = 0 ] && [ "$(id -u)" = 0 ] && ! command -v nft >/dev/null; then
    # tests/cluster cuts single links between network namespaces with nftables (root only).
    step "nftables for the cluster tests' one-link cuts"
    if command -v apt-get >/dev/null && apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null; then
        echo "installed $(command -v nft)"
    else
        echo "could not install nftables with apt-get: the one-link cut tests will be skipped"
    fi
fi

step "Rust: format, lints, tests"
cargo fmt --all -- --check
if [ "$QUICK" = 0 ]; then
    cargo clippy --workspace --all-targets --locked -- -D warnings
fi
cargo test -p ferromq-store -p ferromq-remoting -p ferromq-broker -p ferromq-grpc --locked

step "Python: lints, types, stub"
"$VENV/bin/ruff" check python tests benches examples
"$VENV/bin/ruff" format --check python tests benches examples
"$VENV/bin/mypy"
if [ "$QUICK" = 0 ]; then
    "$VENV/bin/python" -m mypy.stubtest ferromq._store
fi

step "Docs: mkdocs build --strict (links and anchors)"
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet  # (the variable: no upgrade banner)

step "Python: tests ($WORKERS workers)"
if [ "$QUICK" = 1 ]; then
    "$VENV/bin/pytest" -n "$WORKERS" --dist loadfile -m "not slow and not interop and not spark" \
        tests/unit tests/integration "$@"
    exit 0
fi
# The slowest tests are listed at the end: where the suite's time goes.
"$VENV/bin/pytest" -n "$WORKERS" --dist loadfile --durations=25 "$@"

# Reached only when every test passed (set -e). Renders the README's compatibility section from the
# interop results into build/compat-section.md and prints it; README.md itself is updated by hand with
# `.venv/bin/python scripts/compat_report.py --write` after a full green run.
if [ -f build/compat-results.json ]; then
    step "Compatibility report (build/compat-section.md)"
    "$VENV/bin/python" scripts/compat_report.py
fi
