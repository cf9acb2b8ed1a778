"""Table topics on object storage: what delta-rs and pyarrow need to reach an `s3://bucket/prefix`.

Both take the same settings, as delta-rs's `storage_options` names them (the standard AWS_*
environment variables): `AWS_ENDPOINT_URL` (an S3-compatible server; a plain `http://` one is
allowed, `AWS_ALLOW_HTTP=true`, and addressed path-style), `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` and `AWS_REGION` (or `AWS_DEFAULT_REGION`). Those
given (broker.conf's tableTopicS3* keys) win over the environment's. Commits use S3's conditional
writes (`AWS_CONDITIONAL_PUT=etag`: a log entry is written only if it does not exist yet), so two
writers cannot both take a table version, as on a local disk; no lock service is needed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlparse

import pyarrow.fs as pafs

_KEYS = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_ALLOW_HTTP",
    "AWS_CONDITIONAL_PUT",
)


def is_s3(uri: str) -> bool:
    return urlparse(uri).scheme in ("s3", "s3a")


def storage_options(uri: str, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """delta-rs's storage_options for `uri`: `given` over the AWS_* environment; {} for a URI that
    is not s3:// (delta-rs and pyarrow then read the environment themselves)."""
    if not is_s3(uri):
        return dict(given or {})
    out = {k: os.environ[k] for k in _KEYS if os.environ.get(k)}
    if "AWS_REGION" not in out and os.environ.get("AWS_DEFAULT_REGION"):
        out["AWS_REGION"] = os.environ["AWS_DEFAULT_REGION"]
    out.update({k: v for k, v in (given or {}).items() if v})
    endpoint = out.get("AWS_ENDPOINT_URL", "")
    if endpoint.startswith("http://"):
        out.setdefault("AWS_ALLOW_HTTP", "true")
    if endpoint:
        out["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"  # path-style: http://host:port/bucket/key
    out.setdefault("AWS_CONDITIONAL_PUT", "etag")
    return out


def filesystem(
    uri: str, options: Mapping[str, str] | None = None, request_timeout: float = 30
) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of `uri` and the path of `uri` in it (for s3://, `bucket/prefix`),
    configured from the same `options` as delta-rs; an S3 request gives up after
    `request_timeout` seconds."""
    if not is_s3(uri):
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, str(path)
    opts = storage_options(uri, options)
    endpoint = opts.get("AWS_ENDPOINT_URL", "")
    parsed = urlparse(endpoint) if endpoint else None
    fs = pafs.S3FileSystem(
        access_key=opts.get("AWS_ACCESS_KEY_ID"),
        secret_key=opts.get("AWS_SECRET_ACCESS_KEY"),
        session_token=opts.get("AWS_SESSION_TOKEN"),
        region=opts.get("AWS_REGION"),
        endpoint_override=parsed.netloc + parsed.path.rstrip("/") if parsed else None,
        scheme=parsed.scheme if parsed else "https",
        force_virtual_addressing=False,
        # A stopped server is retried by the caller (the next tiering cycle), not for minutes here.
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=3),
        connect_timeout=5,
        request_timeout=request_timeout,
    )
    parsed_uri = urlparse(uri)
    return fs, (parsed_uri.netloc + parsed_uri.path).rstrip("/")
