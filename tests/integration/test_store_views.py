"""Read-only views need none of the writer's size settings to read queues (Spark, tools)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferromq.errors import InvalidArgumentError
from ferromq.store import MessageStore


def test_a_view_takes_segment_sizes_from_the_files_and_reports_a_foreign_index(tmp_path: Path) -> None:
    sizes = {
        "mapped_file_size_commitlog": 64 * 1024,
        "mapped_file_size_consume_queue": 20 * 50,
        "max_hash_slot_num": 100,
        "max_index_num": 400,
    }
    with MessageStore(tmp_path, **sizes) as store:
        for i in range(300):
            store.put("Views", i % 2, f"m{i}".encode() * 100, keys=f"k{i}")
    assert len(list((tmp_path / "commitlog").iterdir())) > 3

    with MessageStore.open_read_only(tmp_path) as view:  # default (1 GiB / 6 MB) sizes
        got = [m.payload() for q in (0, 1) for m in view.get_messages("Views", q, 0, max_count=1000)]
        assert sorted(got) == sorted(f"m{i}".encode() * 100 for i in range(300))
        with pytest.raises(InvalidArgumentError, match="maxHashSlotNum"):
            view.query("Views", "k7")

    with MessageStore.open_read_only(tmp_path, max_hash_slot_num=100, max_index_num=400) as view:
        assert [m.body for m in view.query("Views", "k7")] == [b"m7" * 100]
