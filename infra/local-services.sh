#!/usr/bin/env bash
# Starts (or stops) the local stand-ins of the AWS services and etcd on 127.0.0.1, for
# running the functions by hand (`cargo lambda watch` with AWS_ENDPOINT_URL pointing
# here) and as a CI health check. The automated tests do not share these: each test
# starts its own moto and etcd on free ports (shared/kfs-testkit), so tests never see
# each other's state.
#
#   infra/local-services.sh start   # moto on :5000 (S3, DynamoDB, Glue, Secrets Manager), etcd on :2379
#   infra/local-services.sh check   # both answer
#   infra/local-services.sh stop
#
# Ports and the state directory can be changed with MOTO_PORT, ETCD_PORT, ETCD_PEER_PORT
# and KFS_SERVICES_DIR. After `start`, use:
#   export AWS_ENDPOINT_URL=http://127.0.0.1:5000 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
#   export ETCD_ENDPOINTS=http://127.0.0.1:2379
set -euo pipefail
moto_port=${MOTO_PORT:-5000}
etcd_port=${ETCD_PORT:-2379}
etcd_peer_port=${ETCD_PEER_PORT:-2380}
dir=${KFS_SERVICES_DIR:-${TMPDIR:-/tmp}/kfs-local-services}

wait_for() { # name, command...
    local name=$1; shift
    for _ in $(seq 1 100); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    echo "local-services: $name did not come up (logs in $dir)" >&2
    return 1
}

check() {
    curl -fsS "http://127.0.0.1:${moto_port}/moto-api/" >/dev/null
    ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:${etcd_port}" endpoint health >/dev/null 2>&1
}

case "${1:-}" in
start)
    mkdir -p "$dir"
    if [ ! -f "$dir/moto.pid" ] || ! kill -0 "$(cat "$dir/moto.pid")" 2>/dev/null; then
        moto_server -H 127.0.0.1 -p "$moto_port" >"$dir/moto.log" 2>&1 &
        echo $! >"$dir/moto.pid"
    fi
    if [ ! -f "$dir/etcd.pid" ] || ! kill -0 "$(cat "$dir/etcd.pid")" 2>/dev/null; then
        etcd --data-dir "$dir/etcd-data" \
            --listen-client-urls "http://127.0.0.1:${etcd_port}" \
            --advertise-client-urls "http://127.0.0.1:${etcd_port}" \
            --listen-peer-urls "http://127.0.0.1:${etcd_peer_port}" \
            --initial-advertise-peer-urls "http://127.0.0.1:${etcd_peer_port}" \
            --initial-cluster "default=http://127.0.0.1:${etcd_peer_port}" >"$dir/etcd.log" 2>&1 &
        echo $! >"$dir/etcd.pid"
    fi
    wait_for moto curl -fsS "http://127.0.0.1:${moto_port}/moto-api/"
    wait_for etcd env ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:${etcd_port}" endpoint health
    echo "local-services: moto on http://127.0.0.1:${moto_port}, etcd on http://127.0.0.1:${etcd_port}"
    ;;
check)
    check && echo "local-services: up"
    ;;
stop)
    for name in moto etcd; do
        if [ -f "$dir/$name.pid" ]; then
            kill "$(cat "$dir/$name.pid")" 2>/dev/null || true
            rm -f "$dir/$name.pid"
        fi
    done
    rm -rf "$dir/etcd-data"
    echo "local-services: stopped"
    ;;
*)
    echo "usage: $0 start|check|stop" >&2
    exit 2
    ;;
esac
