#!/usr/bin/env bash
# The seeded simulation at its full count: 1,000 seeds (KFS_SIM_SEEDS to change it),
# where `cargo test` runs 100 in debug builds. CI runs this after scripts/test.sh, on
# the test binary that run built: an optimised build of the core's dependency stack
# costs more minutes on two cores than it saves. Temporary state goes to /dev/shm
# when there is one (SQLite's syncs cost a sixth of the run on disk).
#
#   scripts/simulation.sh                 1,000 seeds on the debug test binary
#   scripts/simulation.sh --soak 100000   a soak: the `soak` profile (optimised, no
#                                         LTO), one process per core, each on its own
#                                         range of seeds; logs in target/soak-logs/
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi
test_name=simulation::seeded_simulation_keeps_exactly_once

if [ "${1:-}" != "--soak" ]; then
    export KFS_SIM_SEEDS=${KFS_SIM_SEEDS:-1000}
    # The whole workspace selected, so that features resolve as in scripts/test.sh and
    # the binary it built is the one run (the other crates' binaries match no test).
    exec cargo test --workspace --locked --test integration -- --exact "$test_name" --nocapture
fi

seeds=${2:?usage: scripts/simulation.sh --soak SEEDS [FIRST_SEED]}
first=${3:-0}
processes=$(nproc)
cargo test --profile soak -p kfs-core --locked --test integration --no-run
binary=$(cargo test --profile soak -p kfs-core --locked --test integration --no-run \
    --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "integration" and "kfs-core" in m["package_id"]:
        print(m["executable"])
')
logs=target/soak-logs
mkdir -p "$logs"
echo "soak: $seeds seeds from $first, $processes processes, commit $(git rev-parse --short HEAD), binary $binary"
share=$(( (seeds + processes - 1) / processes ))
start=$(date +%s)
pids=()
for ((i = 0; i < processes; i++)); do
    from=$(( first + i * share ))
    count=$(( share < first + seeds - from ? share : first + seeds - from ))
    [ "$count" -gt 0 ] || continue
    KFS_SIM_FIRST_SEED=$from KFS_SIM_SEEDS=$count \
        "$binary" --exact "$test_name" --nocapture >"$logs/seeds-$from.log" 2>&1 &
    pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
done
elapsed=$(( $(date +%s) - start ))
tail -n 3 "$logs"/seeds-*.log
echo "soak: $seeds seeds in ${elapsed}s ($(( seeds / (elapsed > 0 ? elapsed : 1) )) seeds/s), $([ $failed = 0 ] && echo 'no failure' || echo FAILED)"
exit $failed
