#!/usr/bin/env bash
# The project's test command: formatting, lints (warnings are errors), docs, and every
# test of the workspace. Needs the Python packages of tests/requirements.txt for the
# independent-encoder tests. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy (-D warnings)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo doc (-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

echo "== cargo test"
cargo test --workspace --locked
