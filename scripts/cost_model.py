#!/usr/bin/env python3
"""Cost model: what kfs-iceberg costs per GiB ingested and per month, on AWS.

Compute comes from the measured converter throughput (`scripts/macro_bench.py`); the
per-segment request counts come from what the code does for each segment; prices are
AWS's published us-east-1 list prices (see PRICES). Prints a Markdown table for two
segment sizes: KB-sized segments (the broker's default, one per produce request) and
4 MiB segments (`KAFSCALE_SEGMENT_BYTES`).

    python3 scripts/cost_model.py --throughput 300

Every figure is an estimate: the per-segment wait on S3 and DynamoDB (`--wait-ms`) is an
assumption, not a measurement, and free tiers are ignored.
"""

from __future__ import annotations

import argparse

GIB = 1 << 30
MIB = 1 << 20
SECONDS_PER_MONTH = 30 * 86_400

# us-east-1 list prices, November 2026.
PRICES = {
    "lambda_gb_second_arm64": 0.0000133334,  # aws.amazon.com/lambda/pricing
    "lambda_request": 0.20 / 1e6,
    "dynamodb_write_unit": 0.625 / 1e6,  # on-demand, after the Nov 2024 reduction
    "dynamodb_read_unit": 0.125 / 1e6,
    "s3_put": 0.005 / 1000,  # PUT, COPY, POST, LIST
    "s3_get": 0.0004 / 1000,  # GET, HEAD
    "sqs_request": 0.40 / 1e6,
    "scheduler_invocation": 1.00 / 1e6,
    "firehose_iceberg_gib": 0.075,  # Amazon Data Firehose, Apache Iceberg destination
}

# What the code does per segment (converter, committer, compaction).
PER_SEGMENT = {
    # S3 ObjectCreated for .kfs and .index, each sent to SQS, received and deleted in
    # batches of 10.
    "sqs_requests": 2 * (1 + 2 / 10),
    "lambda_requests": 2 / 10,
    # HEAD (stat), GET of the segment, PUT of its Parquet file, GET of that file when
    # the committer coalesces it, and a share of the merged file's PUT.
    "s3_gets": 3,
    "s3_puts": 1,
    # Pending insert and committed update, items of about 1-2 KB.
    "dynamodb_writes": 4,
    "dynamodb_reads": 1,
}


def per_gib(segment_bytes: int, throughput_mib_s: float, wait_ms: float, memory_mb: int,
            concurrency: int) -> dict[str, float]:
    segments = GIB / segment_bytes
    vcpu = memory_mb / 1769  # Lambda allocates one vCPU at 1,769 MB
    compute_seconds = (GIB / MIB) / (throughput_mib_s * min(vcpu, 1.0))
    wait_seconds = segments * wait_ms / 1000 / concurrency
    gb_seconds = (compute_seconds + wait_seconds) * memory_mb / 1024
    costs = {
        "Lambda compute": gb_seconds * PRICES["lambda_gb_second_arm64"],
        "Lambda requests": segments * PER_SEGMENT["lambda_requests"] * PRICES["lambda_request"],
        "SQS": segments * PER_SEGMENT["sqs_requests"] * PRICES["sqs_request"],
        "S3 requests": segments * (PER_SEGMENT["s3_gets"] * PRICES["s3_get"]
                                   + PER_SEGMENT["s3_puts"] * PRICES["s3_put"]),
        "DynamoDB": segments * (PER_SEGMENT["dynamodb_writes"] * PRICES["dynamodb_write_unit"]
                                + PER_SEGMENT["dynamodb_reads"] * PRICES["dynamodb_read_unit"]),
    }
    costs["total"] = sum(costs.values())
    costs["gb_seconds"] = gb_seconds
    costs["segments"] = segments
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--throughput", type=float, required=True,
                        help="converter MiB/s of payload per vCPU (scripts/macro_bench.py)")
    parser.add_argument("--wait-ms", type=float, default=100,
                        help="assumed S3 + DynamoDB latency per segment (default 100)")
    parser.add_argument("--memory-mb", type=int, default=1769)
    parser.add_argument("--concurrency", type=int, default=4,
                        help="segments converted at once per invocation (CONVERT_CONCURRENCY)")
    args = parser.parse_args()

    rates = {"10 MiB/s": 10 * MIB, "1 GiB/s": GIB}
    print(f"Converter at {args.throughput:.0f} MiB/s per vCPU, {args.memory_mb} MB functions, "
          f"{args.wait_ms:.0f} ms of request latency per segment, {args.concurrency} segments "
          f"at a time; 30-day month.\n")
    print("| segment size | per GiB: Lambda | S3 requests | DynamoDB | SQS + invocations | "
          "total per GiB | month at 10 MiB/s | month at 1 GiB/s |")
    print("|---|---|---|---|---|---|---|---|")
    for label, size in (("64 KiB (one per produce request)", 64 * 1024),
                        ("4 MiB (KAFSCALE_SEGMENT_BYTES)", 4 * MIB)):
        c = per_gib(size, args.throughput, args.wait_ms, args.memory_mb, args.concurrency)
        months = [c["total"] * rate * SECONDS_PER_MONTH / GIB for rate in rates.values()]
        print(f"| {label} | ${c['Lambda compute']:.5f} ({c['gb_seconds']:.1f} GB-s) | "
              f"${c['S3 requests']:.5f} | ${c['DynamoDB']:.5f} | "
              f"${c['SQS'] + c['Lambda requests']:.5f} | **${c['total']:.4f}** | "
              f"${months[0]:,.0f} | ${months[1]:,.0f} |")
    firehose = PRICES["firehose_iceberg_gib"]
    print(f"| Amazon Data Firehose to Iceberg, list price | | | | | ${firehose:.4f} | "
          f"${firehose * rates['10 MiB/s'] * SECONDS_PER_MONTH / GIB:,.0f} | "
          f"${firehose * GIB * SECONDS_PER_MONTH / GIB:,.0f} |")
    print("| Connector pipeline, quoted estimate ($3.4 M a year at 1 GiB/s) | | | | | | | "
          f"${3.4e6 / 12:,.0f} |")


if __name__ == "__main__":
    main()
