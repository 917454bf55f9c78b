#!/usr/bin/env python3
"""Checks that template.yaml declares the ledger table exactly as
infra/ledger-table.json (the definition the tests create the table from), that every
function's SQS event source reports partial batch failures and has a maximum
concurrency, that no policy grants `Resource: "*"`, that schedules have no fixed name
(two stacks deploy in one account and region), that the committer's ticks never
overlap by retry, and that every function's logs have a retention.

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
def walk(value, path=""):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from walk(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from walk(inner, f"{path}[{index}]")
    else:
        yield path, value


resources = template["Resources"]
for path, value in walk(plain(resources)):
    if path.endswith(".Resource") or ".Resource[" in path:
        if value == "*":
            sys.exit(f"template.yaml grants Resource '*' at {path}")
functions = {name: r for name, r in resources.items() if r["Type"] == "AWS::Serverless::Function"}
for name, resource in functions.items():
    properties = resource["Properties"]
    for event_name, event in properties.get("Events", {}).items():
        if event["Type"] == "SQS" and "MaximumConcurrency" not in event["Properties"].get("ScalingConfig", {}):
            sys.exit(f"{name}.{event_name}: an SQS event source needs a maximum concurrency")
        if event["Type"] in ("Schedule", "ScheduleV2") and event["Properties"].get("OmitName") is not True:
            sys.exit(f"{name}.{event_name}: a schedule with a fixed name clashes with a second stack")
    log_groups = [
        r for r in resources.values()
        if r["Type"] == "AWS::Logs::LogGroup"
        and name in json.dumps(plain(r["Properties"].get("LogGroupName")))
    ]
    if not log_groups or "RetentionInDays" not in log_groups[0]["Properties"]:
        sys.exit(f"{name}: its log group needs a retention")
committer = functions["CommitterFunction"]["Properties"]
invoke = committer.get("EventInvokeConfig", {})
if invoke.get("MaximumRetryAttempts") != 0 or "ReservedConcurrentExecutions" not in committer:
    sys.exit("CommitterFunction: ticks must not be retried nor overlap (EventInvokeConfig, ReservedConcurrentExecutions)")
print("template.yaml agrees with infra/ledger-table.json and the deployment rules")
