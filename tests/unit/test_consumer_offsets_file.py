"""consumerOffset.json as the broker writes it: the Rust table makes the bytes itself (a million lite
topics' offsets took Python seconds to copy and sort), and they are the bytes Python's own writer makes of
the same table (`dump_json`), so the file reads the same either way, by ferromq and by Java."""

from __future__ import annotations

from pathlib import Path

from ferromq import _store
from ferromq.broker.json_files import dump_json, load_json_file
from ferromq.broker.offsets import ConsumerOffsetManager


def filled(m: ConsumerOffsetManager) -> None:
    m.commit("Group", "Topic", 10, 100)
    m.commit("Group", "Topic", 9, 90)
    m.commit("Group", "Topic", 0, 0)
    m.commit("LiteG", "%LMQ%$Parent$session-1", 0, -1)
    m.commit("Grüppe", "Tópico", 2, 1 << 40)
    m.put_all('odd "key"\\\t\n\x01/@g', {3: 3})
    m.put_all("Empty@g", {})


def test_the_rust_bytes_are_the_python_writers(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
    assert m.shared.to_json() == dump_json({"offsetTable": {}})
    filled(m)
    assert m.shared.to_json() == dump_json({"offsetTable": m.table})


def test_persisted_offsets_load_back(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    m = ConsumerOffsetManager(path)
    filled(m)
    m.persist()
    written = {k: {str(q): o for q, o in v.items()} for k, v in m.table.items()}
    assert load_json_file(path) == {"offsetTable": written}
    again = ConsumerOffsetManager(path)
    assert again.table == m.table
    assert again.query("Group", "Topic", 10) == 100
    m.commit("Group", "Topic", 10, 101)
    m.persist()  # the old file is kept as .bak
    backup = load_json_file(path.with_name(path.name + ".bak"))
    assert backup is not None and backup["offsetTable"]["Topic@Group"]["10"] == 100
    assert ConsumerOffsetManager(path).query("Group", "Topic", 10) == 101


def test_a_large_table_is_written_whole() -> None:
    t = _store.ConsumerOffsets()
    for i in range(20_000):
        t.commit("LiteG", f"%LMQ%$P$s{i}", 0, i)
    text = t.to_json()
    assert text.count(b'@LiteG": {') == 20_000
    assert text.startswith(b'{\n  "offsetTable": {\n    "%LMQ%$P$s0@LiteG": {\n      "0": 0\n    },')
