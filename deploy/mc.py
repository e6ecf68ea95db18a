"""The few MinIO client (``mc``) commands the compose file uses, for the twin (no MinIO binary here).

``mc mb [--ignore-existing] ALIAS/BUCKET``, ``mc stat ALIAS/BUCKET`` and ``mc ready ALIAS``, with
aliases from ``MC_HOST_<alias>=http://KEY:SECRET@host:port`` as the real ``mc`` reads them; the
alias ``local`` defaults to ``http://127.0.0.1:9000`` (what the MinIO image configures).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import unquote, urlsplit


def _alias(name: str) -> tuple[str, str, str]:
    """``(endpoint_url, access_key, secret_key)`` of an alias."""
    url = os.environ.get(f"MC_HOST_{name}")
    if url is None:
        if name != "local":
            raise SystemExit(f"mc: alias {name!r} is not configured (set MC_HOST_{name})")
        url = "http://127.0.0.1:9000"
    parts = urlsplit(url)
    endpoint = f"{parts.scheme}://{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
    return endpoint, unquote(parts.username or ""), unquote(parts.password or "")


def _s3(alias: str):  # type: ignore[no-untyped-def]
    import boto3

    endpoint, key, secret = _alias(alias)
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key or "anonymous",
        aws_secret_access_key=secret or "anonymous",
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    )


def _target(path: str) -> tuple[str, str]:
    alias, _, bucket = path.partition("/")
    if not bucket:
        raise SystemExit(f"mc: {path!r} names no bucket (ALIAS/BUCKET)")
    return alias, bucket.strip("/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mc", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("mb", help="make a bucket")
    p.add_argument("--ignore-existing", "-p", action="store_true")
    p.add_argument("target", metavar="ALIAS/BUCKET")
    p = sub.add_parser("stat", help="check that a bucket exists")
    p.add_argument("target", metavar="ALIAS/BUCKET")
    p = sub.add_parser("ready", help="check that the server answers")
    p.add_argument("alias")
    args = parser.parse_args(argv)

    if args.command == "ready":
        endpoint, _, _ = _alias(args.alias)
        try:
            urllib.request.urlopen(endpoint + "/", timeout=3).close()
        except urllib.error.HTTPError:
            pass  # any HTTP answer means the server is up
        except OSError as err:
            print(f"mc: {endpoint} is not ready: {err}", file=sys.stderr)
            return 1
        print(f"'{args.alias}' is ready")
        return 0

    alias, bucket = _target(args.target)
    s3 = _s3(alias)
    if args.command == "stat":
        s3.head_bucket(Bucket=bucket)
        print(f"Name: {bucket}")
        return 0
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if bucket in existing:
        if args.ignore_existing:
            print(f"Bucket `{args.target}` already exists.")
            return 0
        print(f"mc: bucket {args.target} already exists", file=sys.stderr)
        return 1
    for attempt in range(5):
        try:
            s3.create_bucket(Bucket=bucket)
            break
        except Exception:
            if attempt == 4:
                raise
            time.sleep(1)
    print(f"Bucket created successfully `{args.target}`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
