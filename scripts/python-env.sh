# The tests' Python, in a virtual environment of its own (target/test-venv, or
# KFS_TEST_VENV): made, or brought up to date, from tests/requirements.txt when that
# file changed, then put first on PATH, so that every `python3`, `moto_server` and
# `cargo lambda` the tests start is the environment's. Sourced by scripts/test.sh and
# .ci/run; nothing is installed outside it.
kfs_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${KFS_TEST_VENV:-$kfs_root/target/test-venv}
requirements_hash=$(sha256sum "$kfs_root/tests/requirements.txt" | cut -c1-16)
if [ ! -f "$venv/.requirements-$requirements_hash" ]; then
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
        echo "The tests make their own Python environment, and this python3 cannot:" >&2
        echo "  on Debian or Ubuntu: apt-get install python3-venv" >&2
        exit 1
    fi
    echo "== the tests' Python environment ($venv, from tests/requirements.txt)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$kfs_root/tests/requirements.txt"
    touch "$venv/.requirements-$requirements_hash"
fi
VIRTUAL_ENV=$(cd "$venv" && pwd)
export VIRTUAL_ENV
export PATH="$VIRTUAL_ENV/bin:$PATH"
unset kfs_root venv requirements_hash
