#!/usr/bin/env python3
"""A slow schema registry for measuring lookups (issue 36, finding 7).

Speaks the part of the Confluent REST API kfs-iceberg reads (GET /schemas/ids/{id}),
answering each request after --latency-ms: 404 for every id (--mode missing), or one
Avro record schema for every id (--mode found). GET /stats answers the requests
served so far (and the most served at once). Writes its port to --port-file.

    python3 scripts/registry_stub.py --port-file /tmp/stub.port --latency-ms 14 --mode missing
"""
import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LONG = {"type": "record", "name": "N", "fields": [{"name": "n", "type": "long"}]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--latency-ms", type=float, default=14.0)
    parser.add_argument("--mode", choices=("missing", "found"), default="missing")
    args = parser.parse_args()
    lock = threading.Lock()
    stats = {"requests": 0, "now": 0, "most": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def do_GET(self):
            if self.path == "/stats":
                with lock:
                    return self.answer(200, dict(stats))
            with lock:
                stats["requests"] += 1
                stats["now"] += 1
                stats["most"] = max(stats["most"], stats["now"])
            time.sleep(args.latency_ms / 1000)
            with lock:
                stats["now"] -= 1
            parts = self.path.strip("/").split("/")
            if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and args.mode == "found":
                return self.answer(200, {"schema": json.dumps(LONG)})
            self.answer(404, {"error_code": 40403, "message": "Schema not found"})

        def answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
