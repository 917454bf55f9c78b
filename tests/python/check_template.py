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

# The dashboard is deployed as a resource, and is infra/dashboard.json.
body = resources.get("Dashboard", {}).get("Properties", {}).get("DashboardBody", {})
body = plain(body).get("Fn::Sub") if isinstance(plain(body), dict) else None
if body is None or json.loads(body) != json.loads((root / "infra/dashboard.json").read_text()):
    sys.exit("template.yaml Dashboard differs from infra/dashboard.json")

# Every setting the functions read has a place in the template (a parameter behind it).
import re

documented = re.findall(r"^//! \| `([A-Z_0-9]+)`(?:, `([A-Z_0-9]+)`)?(?:, `([A-Z_0-9]+)`)?", (root / "shared/kfs-aws/src/function_env.rs").read_text(), re.M)
names = {name for row in documented for name in row if name}
text = (root / "template.yaml").read_text()
unset = sorted(name for name in names if f"{name}:" not in text)
if unset:
    sys.exit(f"settings the functions read but the template never sets: {unset}")

# Transformed as CloudFormation will (SAM's own translator), no resource has a fixed
# physical name: two stacks deploy in one account and region.
import os

from samtranslator.translator.transform import transform


class NoManagedPolicies:
    def load(self):
        return {}


os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
sam = json.loads(json.dumps(template))
for resource in sam["Resources"].values():
    if resource["Type"] == "AWS::Serverless::Function":
        resource["Properties"]["CodeUri"] = "s3://artifacts/functions.zip"
transformed = transform(sam, {"SegmentBucketName": "segments", "WarehouseBucketName": "lake"}, NoManagedPolicies())
NAME_PROPERTIES = {"FunctionName", "TableName", "QueueName", "Name", "AlarmName", "DashboardName", "RoleName", "RuleName", "LogGroupName", "ScheduleGroupName"}
for logical, resource in transformed["Resources"].items():
    for key, value in resource.get("Properties", {}).items():
        if key in NAME_PROPERTIES and isinstance(value, str):
            sys.exit(f"transformed template: {logical}.{key} is the fixed name {value!r}; a second stack would clash")
print("template.yaml agrees with infra/ledger-table.json and the deployment rules; transformed, it names no resource")
