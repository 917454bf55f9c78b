#!/usr/bin/env bash
# The converter as Lambda runs it: `cargo lambda watch` serves the built function and
# `cargo lambda invoke` delivers a sample SQS event (see
# functions/converter/tests/servers/cargo_lambda.rs). Run after scripts/test.sh: the
# test binary runs directly, so `cargo lambda` can build in the target directory that
# `cargo test` would otherwise hold. Needs moto and cargo-lambda (tests/requirements.txt,
# `pip install cargo-lambda`).
set -euo pipefail
cd "$(dirname "$0")/.."
binary=$(cargo test --workspace --locked --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if (message.get("reason") == "compiler-artifact" and message.get("executable")
            and message["package_id"].split("#")[0].endswith("functions/converter")
            and message["target"]["kind"] == ["test"]):
        print(message["executable"])
')
if [ -z "$binary" ]; then
    echo "lambda_check: the converter's test binary was not built" >&2
    exit 1
fi
"$binary" --ignored --exact servers::cargo_lambda::the_built_converter_answers_under_cargo_lambda
