#!/usr/bin/env python3
"""Checks that template.yaml declares the ledger table exactly as
infra/ledger-table.json (the definition the tests create the table from), and that
every function's SQS event source reports partial batch failures.

Uses cfn-lint's CloudFormation YAML reader (it understands !Ref and friends)."""

import json
import sys
from pathlib import Path

from cfnlint.decode import decode

root = Path(__file__).resolve().parents[2]
template, errors = decode(str(root / "template.yaml"))
if errors:
    sys.exit(f"template.yaml does not parse: {errors}")
definition = json.loads((root / "infra/ledger-table.json").read_text())
ledger = template["Resources"]["LedgerTable"]["Properties"]


def plain(value):
    return json.loads(json.dumps(value))


for key, expected in definition.items():
    if plain(ledger.get(key)) != expected:
        sys.exit(f"template.yaml LedgerTable.{key} differs from infra/ledger-table.json:\n{plain(ledger.get(key))}\n{expected}")
for name, resource in template["Resources"].items():
    if resource["Type"] != "AWS::Serverless::Function":
        continue
    for event in resource["Properties"].get("Events", {}).values():
        if event["Type"] == "SQS" and "ReportBatchItemFailures" not in event["Properties"].get("FunctionResponseTypes", []):
            sys.exit(f"{name}: its SQS events must use ReportBatchItemFailures")
print("template.yaml agrees with infra/ledger-table.json")
