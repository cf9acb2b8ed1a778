"""The table topics a ferromq broker reports in GET_BROKER_RUNTIME_INFO (`ferromqTableTopics`, a
JSON list): written by the broker (`ferromq.broker.processors.broker_status`), read by the admin
client, `ferromq admin table-topics` and the console."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ferromq.jsonutil import loads_lenient


@dataclass(frozen=True)
class TableTopicStatus:
    """One table topic of a ferromq broker (runtime info's `ferromqTableTopics`): what its tiering
    did since the broker started, and how far the table is behind the log."""

    topic: str
    uri: str
    rows_tiered: int
    commits: int
    failures: int
    rows_lost: int
    version: int | None
    """The table's Delta version; None before the service first read the table."""
    lag: int
    """Messages in the log that are not in the table yet."""
    last_commit_ms: int | None
    last_error: str | None
    tier_cpu_seconds: float = 0.0
    """CPU time the broker's tiering spent on the topic's rows (read, write, commit)."""
    maintain_cpu_seconds: float = 0.0
    """CPU time it spent compacting, expiring and vacuuming the table."""

    def to_json(self) -> dict[str, Any]:
        """As the broker reports it (`ferromqTableTopics`' keys)."""
        return {
            "topic": self.topic,
            "uri": self.uri,
            "rowsTiered": self.rows_tiered,
            "commits": self.commits,
            "failures": self.failures,
            "rowsLost": self.rows_lost,
            "version": self.version,
            "lag": self.lag,
            "lastCommitTimestamp": self.last_commit_ms,
            "lastError": self.last_error,
            "tierCpuSeconds": self.tier_cpu_seconds,
            "maintainCpuSeconds": self.maintain_cpu_seconds,
        }


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _optional_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_table_topics(text: str) -> list[TableTopicStatus]:
    """`ferromqTableTopics`' value; [] when it is not a JSON list, without the entries that are
    not objects with a topic (a newer broker may add fields: they are ignored)."""
    try:
        data = loads_lenient(text)
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    out = []
    for d in data:
        if not isinstance(d, dict) or not isinstance(d.get("topic"), str):
            continue
        error = d.get("lastError")
        out.append(
            TableTopicStatus(
                topic=d["topic"],
                uri=str(d.get("uri") or ""),
                rows_tiered=_count(d.get("rowsTiered")),
                commits=_count(d.get("commits")),
                failures=_count(d.get("failures")),
                rows_lost=_count(d.get("rowsLost")),
                version=_optional_int(d.get("version")),
                lag=_count(d.get("lag")),
                last_commit_ms=_optional_int(d.get("lastCommitTimestamp")),
                last_error=error if isinstance(error, str) else None,
                tier_cpu_seconds=_seconds(d.get("tierCpuSeconds")),
                maintain_cpu_seconds=_seconds(d.get("maintainCpuSeconds")),
            )
        )
    return out
