#!/usr/bin/env bash
# The seeded simulation at its full count (1,000 seeds unless KFS_SIM_SEEDS says
# otherwise), built optimised (the `simulation` profile) so that it runs in about a
# minute; `cargo test` runs 100 seeds in debug builds. CI runs this after the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked --profile simulation -p kfs-core --test integration \
    -- --exact simulation::seeded_simulation_keeps_exactly_once --nocapture
