#!/usr/bin/env python3
"""Tiny AWS helper for tests against a local moto server: make buckets, upload a
directory tree, create the ledger table from infra/ledger-table.json. Credentials,
region and endpoint from the AWS_* environment variables.

    s3_tool.py mb BUCKET...
    s3_tool.py put DIR s3://bucket/prefix
    s3_tool.py ledger TABLE_NAME DEFINITION.json
    s3_tool.py secret NAME VALUE          (prints the secret's ARN)
    s3_tool.py table-bucket NAME          (an S3 Tables table bucket; prints its ARN)
    s3_tool.py parameter NAME VALUE       (an SSM SecureString parameter; prints its ARN)
    s3_tool.py stack NAME KEY=VALUE...    (deploys template.yaml, transformed by SAM's
                                           own translator, as stack NAME with those
                                           parameters; prints its outputs as JSON)
    s3_tool.py function-env FUNCTION      (a function's environment variables as JSON)
    s3_tool.py etags s3://bucket/prefix   (every object's ETag and size, as JSON)
    s3_tool.py record start|stop          (moto's request recorder, on a server started
                                           with MOTO_ENABLE_RECORDING (and
                                           MOTO_RECORDER_FILEPATH); stop prints the
                                           requests recorded since start, counted per
                                           service and operation, as JSON)
"""

import json

import os
import sys

import boto3


def client(service="s3"):
    return boto3.client(
        service,
        endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
    )


def main():
    command, *args = sys.argv[1:]
    s3 = client()
    if command == "mb":
        for bucket in args:
            s3.create_bucket(Bucket=bucket)
    elif command == "put":
        root, url = args
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        count = 0
        for folder, _, files in os.walk(root):
            for name in files:
                path = os.path.join(folder, name)
                key = "/".join(p for p in (prefix.strip("/"), os.path.relpath(path, root)) if p)
                with open(path, "rb") as f:
                    s3.put_object(Bucket=bucket, Key=key, Body=f.read())
                count += 1
        print(f"uploaded {count} objects to {url}")
    elif command == "notify":
        # The bucket's ObjectCreated events go to the queue (moto delivers them itself).
        bucket, queue_arn = args
        s3.put_bucket_notification_configuration(
            Bucket=bucket,
            NotificationConfiguration={"QueueConfigurations": [
                {"QueueArn": queue_arn, "Events": ["s3:ObjectCreated:*"]}]},
        )
    elif command == "ledger":
        name, definition = args
        with open(definition) as f:
            spec = json.load(f)
        client("dynamodb").create_table(TableName=name, **spec)
        print(f"created ledger table {name}")
    elif command == "parameter":
        name, value = args
        ssm = client("ssm")
        ssm.put_parameter(Name=name, Value=value, Type="SecureString")
        print(ssm.get_parameter(Name=name)["Parameter"]["ARN"])
    elif command == "table-bucket":
        (name,) = args
        print(client("s3tables").create_table_bucket(name=name)["arn"])
    elif command == "secret":
        name, value = args
        created = client("secretsmanager").create_secret(Name=name, SecretString=value)
        print(created["ARN"])
    elif command == "stack":
        name, *parameters = args
        print(json.dumps(deploy(name, dict(p.split("=", 1) for p in parameters))))
    elif command == "etags":
        (url,) = args
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        found = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                found[item["Key"]] = [item["ETag"].strip('"'), item["Size"]]
        print(json.dumps(found))
    elif command == "record":
        (action,) = args
        print(json.dumps(record(action)))
    elif command == "function-env":
        (function,) = args
        configuration = client("lambda").get_function_configuration(FunctionName=function)
        print(json.dumps(configuration["Environment"]["Variables"]))
    else:
        sys.exit(f"unknown command {command}")


def record(action):
    """Starts moto's recorder afresh, or stops it and counts what it recorded: per
    service (from the request's signing scope) and operation (the DynamoDB target, or
    the S3 method, `LIST` for a bucket listing)."""
    import re
    import urllib.request
    from urllib.parse import urlparse, parse_qs

    base = os.environ["AWS_ENDPOINT_URL"].rstrip("/") + "/moto-api/recorder/"

    def call(path, method="POST"):
        with urllib.request.urlopen(urllib.request.Request(base + path, method=method)) as r:
            return r.read().decode()

    if action == "start":
        call("reset-recording")
        call("start-recording")
        return {}
    call("stop-recording")
    counts = {}
    for line in call("download-recording", method="GET").splitlines():
        if not line.strip():
            continue
        request = json.loads(line)
        headers = {k.lower(): v for k, v in request.get("headers", {}).items()}
        if "/moto-api/" in request.get("url", ""):
            continue
        scope = re.search(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/", headers.get("authorization", ""))
        service = scope.group(1) if scope else "unsigned"
        if service == "dynamodb":
            operation = headers.get("x-amz-target", "?").split(".")[-1]
        else:
            operation = request.get("method", "?")
            query = parse_qs(urlparse(request.get("url", "")).query, keep_blank_values=True)
            if operation == "GET" and ("list-type" in query or "prefix" in query or "delimiter" in query):
                operation = "LIST"
        by_service = counts.setdefault(service, {})
        by_service[operation] = by_service.get(operation, 0) + 1
    return counts


def deploy(name, parameters):
    """Transforms template.yaml with the SAM translator (as `sam deploy` has
    CloudFormation do) and creates the stack; the functions' code is a placeholder
    package in an artifacts bucket, as `sam package` would upload."""
    import io
    import zipfile
    from pathlib import Path

    from cfnlint.decode import decode
    from samtranslator.translator.transform import transform

    template, errors = decode(str(Path(__file__).resolve().parents[2] / "template.yaml"))
    if errors:
        sys.exit(f"template.yaml: {errors}")
    s3 = client()
    artifacts = "kfs-artifacts"
    if artifacts not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
        s3.create_bucket(Bucket=artifacts)
        package = io.BytesIO()
        with zipfile.ZipFile(package, "w") as archive:
            archive.writestr("bootstrap", "placeholder")
        s3.put_object(Bucket=artifacts, Key="functions.zip", Body=package.getvalue())
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = f"s3://{artifacts}/functions.zip"

    class NoManagedPolicies:
        def load(self):
            return {}

    os.environ.setdefault("AWS_DEFAULT_REGION", os.environ.get("AWS_REGION", "us-east-1"))
    transformed = transform(json.loads(json.dumps(template)), parameters, NoManagedPolicies())
    cloudformation = client("cloudformation")
    cloudformation.create_stack(
        StackName=name,
        TemplateBody=json.dumps(transformed),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    stack = cloudformation.describe_stacks(StackName=name)["Stacks"][0]
    if stack["StackStatus"] != "CREATE_COMPLETE":
        sys.exit(f"stack {name}: {stack['StackStatus']} {stack.get('StackStatusReason')}")
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


if __name__ == "__main__":
    main()
