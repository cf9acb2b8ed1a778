"""Tiered storage: sealed CommitLog files in a bucket, read through once local retention deleted them.

RocketMQ's tiered store (RIP-57) semantics on ferromq's store: `config` (broker.conf's keys),
`bucket` (the object store: S3-compatible, or a directory), `segments` (what is kept beside each
file to find its messages again), `uploader` (the process that uploads and expires files) and
`service` (the broker's side: it runs the uploader, holds local retention to what the bucket has,
and reads through). The bucket's layout is in docs/tiered-storage.md.
"""
