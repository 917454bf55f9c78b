#!/usr/bin/env bash
# The project's test command: formatting, lints (warnings are errors), docs, the module
# cycle check, file and function lengths, the Markdown links, every test of the
# workspace, and the seeded simulation at its full count. Makes its own Python environment (scripts/python-env.sh, the
# packages of tests/requirements.txt); needs the servers docs/testing.md names (each
# test starts its own). Run from anywhere.
#
#   scripts/test.sh          everything
#   scripts/test.sh --fast   only the tests that need no server (`--skip servers::`)
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/python-env.sh

# What the tests need beyond Rust, checked up front: one message naming everything
# missing and how to get it (`bash .ci/run` installs it all on Debian).
prerequisites() {
    local missing=()
    python3 - <<'PY' || missing+=("Python packages: remove target/test-venv, then run this again")
import importlib.util, sys
needed = ["crc32c", "cramjam", "pyiceberg", "duckdb", "moto", "cfnlint", "fastavro",
          "google.protobuf", "grpc_tools"]
sys.exit(any(importlib.util.find_spec(m) is None for m in needed))
PY
    if [ "${1:-}" != "--fast" ]; then
        { command -v etcd && command -v etcdctl; } >/dev/null \
            || missing+=("etcd: apt-get install etcd-server etcd-client")
        ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null \
            || missing+=("PostgreSQL: apt-get install postgresql")
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        echo "The tests need what this machine lacks:" >&2
        printf '  - %s\n' "${missing[@]}" >&2
        echo "(on Debian, bash .ci/run installs all of it, then runs the tests)" >&2
        exit 1
    fi
}
prerequisites "${1:-}"

if [ "${1:-}" = "--fast" ]; then
    exec cargo test --workspace --locked -- --skip servers::
fi

echo "== cargo fmt --check (at ${SECONDS} s)"
cargo fmt --all -- --check

echo "== cargo clippy (-D warnings) (at ${SECONDS} s)"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo clippy of the Lambda functions as deployed (their features alone: no SQL catalog) (at ${SECONDS} s)"
cargo clippy --locked -- -D warnings

echo "== cargo doc (-D warnings) (at ${SECONDS} s)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

echo "== module cycles (at ${SECONDS} s)"
python3 scripts/module_cycles.py

echo "== file and function lengths of the crates (at ${SECONDS} s)"
python3 scripts/function_lengths.py --check shared/kfs-{core,plan,segment,parquet,values,catalog,aws,etcd,failpoint,testkit,workload}/src \
    cli/src functions/{committer,converter}/src

echo "== doc links (at ${SECONDS} s)"
python3 scripts/check_links.py

echo "== cargo test (and the seeded simulation at full count beside it) (at ${SECONDS} s)"
log=$(mktemp)
cargo test --workspace --locked --no-run
echo "== tests built (at ${SECONDS} s)"
# The simulation's 1,000 seeds run on the test binary just built, at a lower priority,
# while the other tests mostly wait on their servers: it soaks up the idle core.
simulation_log=$(mktemp)
nice -n 10 bash scripts/simulation.sh >"$simulation_log" 2>&1 &
simulation=$!
set +e
# (The simulation's own 100-seed run is left to the full count beside.)
cargo test --workspace --locked -- --skip simulation::seeded_simulation_keeps_exactly_once 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
wait "$simulation"
simulation_status=$?
set -e
grep -E '^test simulation::|^test result:|panicked|seed' "$simulation_log" | tail -n 5
if [ "$simulation_status" -ne 0 ]; then
    cat "$simulation_log" >&2
    echo "the seeded simulation failed (exit $simulation_status)" >&2
    status=1
fi
passed=$(awk '/^test result:/ { s += $4 } END { print s + 0 }' "$log")
failed=$(awk '/^test result:/ { s += $6 } END { print s + 0 }' "$log")
rm -f "$log"
echo "== done (at ${SECONDS} s)"
echo "tests: $passed passed, $failed failed"
exit "$status"
