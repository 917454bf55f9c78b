#!/usr/bin/env python3
"""Cold start of the Lambda functions: process start to ready for the first event.

Serves a minimal Lambda Runtime API on 127.0.0.1 and starts each function binary
against it with a production-like configuration (Glue catalog, DynamoDB ledger,
maintenance on). "Ready" is the function's first `GET .../invocation/next`: its
clients are built and it waits for an event. Prints the median and the slowest of N
starts, and the binary sizes.

    python3 scripts/start_time.py [--runs 20] [--target-dir target/release]

Needs release builds of the functions for this machine
(`cargo build --release --locked -p kfs-committer -p kfs-converter`); the Lambda
package (`cargo lambda build --release --arm64`) holds the same code for arm64.
"""

from __future__ import annotations

import argparse
import http.server
import os
import statistics
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FUNCTIONS = ("kfs-converter", "kfs-committer")


class RuntimeApi(http.server.BaseHTTPRequestHandler):
    """Records when `/invocation/next` is first asked for, then holds the request."""

    ready = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 (the http.server interface)
        if self.path.endswith("/runtime/invocation/next"):
            RuntimeApi.ready_at = time.perf_counter()
            RuntimeApi.ready.set()
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def environment(port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({
        "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{port}",
        "AWS_LAMBDA_FUNCTION_NAME": "kfs-start-time",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
        "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/kfs-start-time",
        "AWS_LAMBDA_LOG_STREAM_NAME": "local",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "start-time",
        "AWS_SECRET_ACCESS_KEY": "start-time",
        "WAREHOUSE": "s3://warehouse/iceberg",
        "SEGMENT_BUCKET": "segments",
        "LEDGER_TABLE": "kfs-ledger",
        "CATALOG_TYPE": "glue",
        "MAINTENANCE": "on",
        "RUST_LOG": "warn",
    })
    return env


def start_once(binary: Path, port: int) -> float:
    RuntimeApi.ready.clear()
    started = time.perf_counter()
    process = subprocess.Popen([str(binary)], env=environment(port),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if not RuntimeApi.ready.wait(timeout=10):
            err = process.stderr.read().decode() if process.poll() is not None else ""
            raise SystemExit(f"{binary.name} never asked for an event: {err}")
        return RuntimeApi.ready_at - started
    finally:
        process.kill()
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--target-dir", type=Path, default=REPO / "target" / "release")
    args = parser.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RuntimeApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    for name in FUNCTIONS:
        binary = args.target_dir / name
        if not binary.exists():
            raise SystemExit(f"{binary} is missing: cargo build --release --locked -p {name}")
        start_once(binary, port)  # warm the page cache, as a provisioned sandbox would be
        times = sorted(start_once(binary, port) for _ in range(args.runs))
        print(f"{name}: start to ready median {statistics.median(times) * 1000:.1f} ms, "
              f"slowest {times[-1] * 1000:.1f} ms over {args.runs} starts; "
              f"binary {binary.stat().st_size:,} bytes")
    server.shutdown()


if __name__ == "__main__":
    main()
