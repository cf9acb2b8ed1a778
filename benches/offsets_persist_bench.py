"""Persisting consumer offsets at lite-topic scale: `config/consumerOffset.json` is written every
flushConsumerOffsetInterval (5 s) while any offset changed, and a lite group has one entry per lite topic.

For 10,000 / 100,000 / 1,000,000 entries (`%LMQ%$Parent$session-N@LiteGroup`, queue 0), in the same run:
- python: the table copied into Python dicts, sorted and dumped by orjson (`dump_json`), as persist did
  before; all of it holds the GIL;
- rust: `ConsumerOffsets.to_json()` (copied under the table's lock, sorted and written in Rust, no GIL);
- persist: what `ConsumerOffsetManager.persist` costs now (to_json, the file written, fsynced, renamed).
Both make the same bytes (checked here; tests/unit/test_consumer_offsets_file.py pins it). Numbers, not
pass/fail: seconds (best of 3) and the ratio rust/python.

    .venv/bin/python benches/offsets_persist_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import ratio, write_results

from ferromq.broker.json_files import dump_json
from ferromq.broker.offsets import ConsumerOffsetManager

OUT = Path(__file__).resolve().parent / "results" / "offsets_persist_bench.json"


def best_of(n: int, work: Callable[[], Any]) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        work()
        times.append(time.perf_counter() - t)
    return min(times)


def run(entries: int, work: Path) -> dict[str, Any]:
    m = ConsumerOffsetManager(work / f"consumerOffset-{entries}.json")
    for i in range(entries):
        m.commit("LiteGroup", f"%LMQ%$Parent$session-{i:07d}", 0, i % 1000)
    made = m.shared.to_json()
    assert made == dump_json({"offsetTable": m.table}), "the two writers differ"
    python_s = best_of(3, lambda: dump_json({"offsetTable": m.table}))
    rust_s = best_of(3, m.shared.to_json)
    persist_s = best_of(3, lambda: m.persist(force=True))
    return {
        "entries": entries,
        "file_mb": round(len(made) / 1e6, 1),
        "python_s": round(python_s, 3),
        "rust_s": round(rust_s, 3),
        "persist_s": round(persist_s, 3),
        "rust_vs_python": ratio(rust_s, python_s),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="10,000 and 100,000 entries only")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    with tempfile.TemporaryDirectory(prefix="offsets-bench-") as tmp:
        rows = [run(n, Path(tmp)) for n in sizes]

    from rich.console import Console
    from rich.table import Table

    t = Table(title="consumerOffset.json: making the file's bytes (best of 3)")
    for col in ("entries", "file MB", "python s", "rust s", "rust/python", "persist s"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            f"{r['entries']:,}",
            str(r["file_mb"]),
            str(r["python_s"]),
            str(r["rust_s"]),
            f"{r['rust_vs_python']:.2f}x",
            str(r["persist_s"]),
        )
    Console().print(t)
    write_results(args.out, {"benchmark": "offsets_persist_bench", "quick": args.quick, "results": rows})


if __name__ == "__main__":
    main()
