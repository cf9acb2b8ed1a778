"""broker.conf's table-topic keys: `TableTopicConfig`, one of the tables `BrokerConfig` is made of.

Imports neither pyarrow nor deltalake: the broker reads these keys whether or not it tiers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ferromq.settings import keys_of, setting

# tableTopicRole: which broker of a master-slave pair tiers its table topics.
TABLE_TOPIC_ROLES = ("MASTER", "SLAVE")
# tableTopicCompression: the codecs of ferromq.tables.writer.CODECS (none costs the broker the least
# CPU and stores the most, zstd the most CPU and stores the least; snappy and lz4 in between).
TABLE_TOPIC_CODECS = ("snappy", "lz4", "zstd", "none")
# tableTopics: this prefix makes the rest a regular expression over topic names.
TABLE_TOPICS_REGEX = "regex:"
_TOPIC_NAME = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")  # TopicValidator's characters and length


@dataclass(frozen=True)
class TableTopicConfig:
    """Table topics (ferromq.tables.tiering, a ferromq feature): the topics of tableTopics are
    appended to one Delta Lake table each under tableTopicPath (a directory or a URI pyarrow and
    delta-rs both write, default <storePathRootDir>/tables). tableTopics is a comma-separated list
    of topic names, or `regex:` and a regular expression matched against whole names (internal
    topics left out); "" tiers nothing. Every tableTopicIntervalSeconds each queue of a topic
    goes in once it holds a whole file's worth of rows (tableTopicTargetFileBytes, which
    compaction then never rewrites) or its oldest waiting row is tableTopicMaxDelaySeconds old;
    tableTopicMinRows > 0 commits instead whenever that many rows wait in all (small files,
    merged later). One queue reads at most tableTopicMaxCommitBytes of records per commit. Every
    tableTopicCompactionIntervalSeconds (0: never) small files are merged towards
    tableTopicTargetFileBytes, days older than tableTopicRetentionDays (0: kept forever) are
    deleted, and files unused for tableTopicVacuumRetentionHours are removed. A partition (day
    and queue) to which tableTopicCompactionFiles files smaller than a whole one were added since
    it was last compacted is compacted at once (0: only on the schedule). tableTopicRole says
    which broker of a master-slave pair tiers: MASTER (default), or SLAVE: the slave, which holds
    the same messages, does the work and the master spends no CPU on it. tableTopicCompression is the
    data files' codec (TABLE_TOPIC_CODECS): CPU spent by the broker against bytes stored.
    With an s3:// tableTopicPath, tableTopicS3Endpoint (e.g. http://127.0.0.1:7070; "" for AWS),
    tableTopicS3AccessKey, tableTopicS3SecretKey and tableTopicS3Region reach the bucket; each
    one left "" is taken from the standard AWS_* environment variables
    (ferromq.tables.objectstore). tableTopicProcess (default true) tiers and compacts in a process
    of its own (ferromq.tables.process), so the broker's CPU goes to messages; false: a thread of
    the broker."""

    table_topics: str = setting("")
    table_topic_path: str | None = setting(None)
    table_topic_interval_seconds: int = setting(10, least=1)
    table_topic_min_rows: int = setting(0, least=0)
    table_topic_max_delay_seconds: int = setting(60, least=0)
    table_topic_max_commit_bytes: int = setting(1024 * 1024 * 1024, least=1024 * 1024)
    table_topic_compaction_interval_seconds: int = setting(3600, least=0)
    table_topic_target_file_bytes: int = setting(128 * 1024 * 1024, least=1024 * 1024)
    table_topic_compaction_files: int = setting(16, least=0)
    table_topic_role: str = setting("MASTER")
    table_topic_compression: str = setting("snappy")
    table_topic_retention_days: int = setting(0, least=0)
    table_topic_vacuum_retention_hours: int = setting(168, least=0)
    table_topic_s3_endpoint: str = setting("")
    table_topic_s3_access_key: str = setting("")
    table_topic_s3_secret_key: str = setting("", secret=True)
    table_topic_s3_region: str = setting("")
    table_topic_process: bool = setting(True)

    @property
    def table_topic_s3_options(self) -> dict[str, str]:
        """The tableTopicS3* keys that are set, as AWS_* storage options (see objectstore)."""
        given = {
            "AWS_ENDPOINT_URL": self.table_topic_s3_endpoint,
            "AWS_ACCESS_KEY_ID": self.table_topic_s3_access_key,
            "AWS_SECRET_ACCESS_KEY": self.table_topic_s3_secret_key,
            "AWS_REGION": self.table_topic_s3_region,
        }
        return {k: v for k, v in given.items() if v}

    @property
    def table_topic_selection(self) -> tuple[tuple[str, ...], str | None]:
        """tableTopics as (topic names, None) or ((), regular expression)."""
        text = self.table_topics.strip()
        if text.startswith(TABLE_TOPICS_REGEX):
            return (), text[len(TABLE_TOPICS_REGEX) :]
        return tuple(t.strip() for t in text.split(",") if t.strip()), None

    def table_topic_problems(self) -> list[tuple[str, str]]:
        """The values of these keys that cannot be (ranges aside), as (field, message)."""
        out: list[tuple[str, str]] = []

        def bad(name: str, must: str) -> None:
            out.append(
                (name, f"{keys_of(TableTopicConfig)[name]} must be {must}, not {getattr(self, name)!r}")
            )

        names, pattern = self.table_topic_selection
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                bad("table_topics", f"names or regex:PATTERN with a valid regular expression ({e})")
        elif not all(_TOPIC_NAME.fullmatch(n) for n in names):
            bad("table_topics", "comma-separated topic names, or regex:PATTERN")
        if self.table_topic_role not in TABLE_TOPIC_ROLES:
            bad("table_topic_role", " or ".join(TABLE_TOPIC_ROLES))
        if self.table_topic_compression not in TABLE_TOPIC_CODECS:
            bad("table_topic_compression", " or ".join(TABLE_TOPIC_CODECS))
        return out
