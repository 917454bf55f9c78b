#!/usr/bin/env python3
"""`moto_server` for the tests, with two changes:

- one fix to moto 5.2's S3 Tables API: `GetTable` answers `"managedByService": false`,
  where AWS sends the managing service's name (a string) or nothing, and the Rust SDK
  rejects a boolean;
- `--ephemeral`: the server binds a port of the system's choice and prints
  `listening on <port>` once it accepts connections, so tests running at once never
  race for a port.

Other arguments are `moto_server`'s."""

import os
import sys

from moto.s3tables import models

_table_init = models.Table.__init__


def _table_init_as_aws(self, *args, **kwargs):
    _table_init(self, *args, **kwargs)
    self.managed_by_service = None


models.Table.__init__ = _table_init_as_aws

from moto.server import DomainDispatcherApplication, create_backend_app, main  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402


def serve_ephemeral(host: str) -> None:
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server(host, 0, app, threaded=True)
    port = server.server_port
    # moto builds its own URLs (presigned, Lambda callbacks) from MOTO_PORT.
    os.environ.setdefault("MOTO_PORT", str(port))
    print(f"listening on {port}", flush=True)
    # The test reads that one line and closes the pipe: nothing more goes to it.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    server.serve_forever()


if __name__ == "__main__":
    if "--ephemeral" in sys.argv:
        host = sys.argv[sys.argv.index("-H") + 1] if "-H" in sys.argv else "127.0.0.1"
        serve_ephemeral(host)
    else:
        sys.exit(main())
