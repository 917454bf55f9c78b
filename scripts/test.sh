#!/usr/bin/env bash
# The project's test command: formatting, lints (warnings are errors), docs, the module
# cycle check, and every test of the workspace. Needs the Python packages of
# tests/requirements.txt and the servers of the README's Test section (each test starts
# its own). Run from anywhere.
#
#   scripts/test.sh          everything
#   scripts/test.sh --fast   only the tests that need no server (`--skip servers::`)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--fast" ]; then
    exec cargo test --workspace --locked -- --skip servers::
fi

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy (-D warnings)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo doc (-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

echo "== module cycles"
python3 scripts/module_cycles.py

echo "== cargo test"
log=$(mktemp)
set +e
cargo test --workspace --locked 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
passed=$(awk '/^test result:/ { s += $4 } END { print s + 0 }' "$log")
failed=$(awk '/^test result:/ { s += $6 } END { print s + 0 }' "$log")
rm -f "$log"
echo "tests: $passed passed, $failed failed"
exit "$status"
