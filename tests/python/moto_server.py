#!/usr/bin/env python3
"""`moto_server` for the tests, with one fix to moto 5.2's S3 Tables API: `GetTable`
answers `"managedByService": false`, where AWS sends the managing service's name (a
string) or nothing, and the Rust SDK rejects a boolean. Arguments as `moto_server`'s."""

import sys

from moto.s3tables import models

_table_init = models.Table.__init__


def _table_init_as_aws(self, *args, **kwargs):
    _table_init(self, *args, **kwargs)
    self.managed_by_service = None


models.Table.__init__ = _table_init_as_aws

from moto.server import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
