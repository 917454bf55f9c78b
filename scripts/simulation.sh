#!/usr/bin/env bash
# The seeded simulation at its full count: 1,000 seeds (KFS_SIM_SEEDS to change it),
# where `cargo test` runs 100 in debug builds. CI runs this after scripts/test.sh, on
# the test binary that run built: an optimised build of the core's dependency stack
# costs more minutes on two cores than it saves. Temporary state goes to /dev/shm
# when there is one (SQLite's syncs cost a sixth of the run on disk).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi
export KFS_SIM_SEEDS=${KFS_SIM_SEEDS:-1000}
# The whole workspace selected, so that features resolve as in scripts/test.sh and
# the binary it built is the one run (the other crates' binaries match no test).
cargo test --workspace --locked --test integration \
    -- --exact simulation::seeded_simulation_keeps_exactly_once --nocapture
