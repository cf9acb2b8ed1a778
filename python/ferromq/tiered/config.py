"""broker.conf's tiered-store keys: `TieredStoreConfig`, one of the tables `BrokerConfig` is made of.

The keys are RocketMQ's tiered store's (RIP-57, `tieredstore/MessageStoreConfig`), with the
providers ferromq has; imports nothing heavy (the broker reads these keys whether or not it tiers).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from ferromq.settings import keys_of, setting

# tieredStorageLevel: DISABLE, or NOT_IN_DISK (read from the bucket what is no longer on local
# disk). RocketMQ's NOT_IN_MEM and FORCE read from the bucket what is still on disk too.
TIERED_STORAGE_LEVELS = ("DISABLE", "NOT_IN_DISK")
# tieredBackendServiceProvider: where the bucket is. RocketMQ's PosixFileSegment (a directory,
# e.g. a mounted file system) is accepted under its Java class name too.
POSIX_PROVIDER = "posix"
S3_PROVIDER = "s3"
JAVA_POSIX_PROVIDER = "org.apache.rocketmq.tieredstore.provider.PosixFileSegment"
TIERED_PROVIDERS = (S3_PROVIDER, POSIX_PROVIDER, JAVA_POSIX_PROVIDER)


@dataclass(frozen=True)
class TieredStoreConfig:
    """Tiered storage (ferromq.tiered): with tieredStorageLevel=NOT_IN_DISK, every sealed CommitLog
    file goes to the bucket of tieredBackendServiceProvider (s3: tieredStoreFilePath
    s3://bucket/prefix, or objectStoreBucket, reached with objectStoreEndpoint,
    objectStoreAccessKey, objectStoreSecretKey and objectStoreRegion, each "" taken from the AWS_*
    environment; posix: tieredStoreFilePath a directory), with what finds its messages again, by
    an uploader process of its own; local retention then deletes only files the bucket has, and
    pulls, queries by key or id and the queue's min offset read through to the bucket for
    messages no longer on disk, through a read cache of tieredStoreReadCacheBytes. Files in the
    bucket older than tieredStoreFileReservedTime hours go every tieredStoreDeleteFileInterval ms
    when tieredStoreDeleteFileEnable."""

    tiered_storage_level: str = setting("DISABLE")
    tiered_backend_service_provider: str = setting(S3_PROVIDER)
    tiered_store_file_path: str = setting("")
    object_store_endpoint: str = setting("")
    object_store_bucket: str = setting("")
    object_store_access_key: str = setting("")
    object_store_secret_key: str = setting("", secret=True)
    object_store_region: str = setting("")
    tiered_store_file_reserved_time: int = setting(72, least=1)
    tiered_store_delete_file_enable: bool = setting(True)
    tiered_store_delete_file_interval: int = setting(3_600_000, least=1000)
    tiered_store_read_cache_bytes: int = setting(64 * 1024 * 1024, least=0)
    tiered_store_upload_interval_ms: int = setting(1000, least=10)

    @property
    def tiered_enabled(self) -> bool:
        return self.tiered_storage_level != "DISABLE"

    @property
    def tiered_uri(self) -> str:
        """Where the bucket is: a directory (posix) or s3://bucket/prefix."""
        if self.tiered_backend_service_provider == S3_PROVIDER and not self.tiered_store_file_path:
            return f"s3://{self.object_store_bucket}" if self.object_store_bucket else ""
        return self.tiered_store_file_path

    @property
    def tiered_s3_options(self) -> dict[str, str]:
        """The objectStore* keys that are set, as AWS_* storage options (ferromq.tables.objectstore)."""
        given = {
            "AWS_ENDPOINT_URL": self.object_store_endpoint,
            "AWS_ACCESS_KEY_ID": self.object_store_access_key,
            "AWS_SECRET_ACCESS_KEY": self.object_store_secret_key,
            "AWS_REGION": self.object_store_region,
        }
        return {k: v for k, v in given.items() if v}

    def tiered_problems(self) -> list[tuple[str, str]]:
        """The values of these keys that cannot be (ranges aside), as (field, message)."""
        keys = keys_of(TieredStoreConfig)
        out: list[tuple[str, str]] = []
        if self.tiered_storage_level not in TIERED_STORAGE_LEVELS:
            out.append(
                (
                    "tiered_storage_level",
                    f"{keys['tiered_storage_level']} must be DISABLE or NOT_IN_DISK, not "
                    f"{self.tiered_storage_level!r} (NOT_IN_MEM and FORCE are not supported)",
                )
            )
        provider = self.tiered_backend_service_provider
        if provider not in TIERED_PROVIDERS:
            out.append(
                (
                    "tiered_backend_service_provider",
                    f"{keys['tiered_backend_service_provider']} must be s3 or posix, not {provider!r}",
                )
            )
        elif self.tiered_enabled:
            uri = self.tiered_uri
            if provider == S3_PROVIDER and urlparse(uri).scheme not in ("s3", "s3a"):
                out.append(
                    (
                        "tiered_store_file_path",
                        f"set {keys['tiered_store_file_path']}=s3://bucket/prefix (or "
                        f"{keys['object_store_bucket']}) for {keys['tiered_backend_service_provider']}=s3",
                    )
                )
            elif provider != S3_PROVIDER and (not uri or "://" in uri):
                out.append(
                    (
                        "tiered_store_file_path",
                        f"set {keys['tiered_store_file_path']} to a directory for the posix provider",
                    )
                )
        return out
