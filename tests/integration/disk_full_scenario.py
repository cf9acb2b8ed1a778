"""Fills a small tmpfs through a real broker, then frees it (run by test_disk_full.py inside a
private mount namespace: `unshare -Urm`, the tmpfs mounted at MOUNT before this starts).

    python -m tests.integration.disk_full_scenario MOUNT MODE OUT.json

MODE `ratio` refuses writes above diskSpaceWarningLevelRatio (90); MODE `enospc` sets it to 100 so
only the disk running out of blocks stops writes. Sends single and batch messages with keys until
the broker refuses several in a row, deletes a filler file, sends until writes are taken again,
then pulls every queue from offset 0 and looks some keys up. Everything the broker answered and
stored goes to OUT.json; the test judges it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R

from .brokerkit import Client, batch_body, properties, pull_ext, running, send_ext

TOPIC = "DiskFull"
QUEUES = 4
BODY_SIZE = 8 * 1024
FILLER_FREE_BYTES = 7 * 1024 * 1024  # left free by the filler, beside the store's own files
MAX_SENDS = 20_000
REFUSALS_IN_A_ROW = 5
RESUME_TIMEOUT_SECONDS = 30.0
AFTER_RESUME = 20


def used_ratio(path: Path) -> float:
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    return used / (used + st.f_bavail * st.f_frsize)


def body(n: int) -> bytes:
    return f"{n:08d}".encode().ljust(BODY_SIZE, b".")


async def scenario(mount: Path, mode: str) -> dict[str, Any]:
    store_dir = mount / "store"
    store_dir.mkdir()
    settings: dict[str, Any] = {
        "mapped_file_size_commitlog": 1024 * 1024,
        "mapped_file_size_consume_queue": 20 * 100,
        "max_hash_slot_num": 1000,
        "max_index_num": 4000,
        "disk_space_warning_level_ratio": 90 if mode == "ratio" else 100,
        # Retention stays out of it: nothing is old, nothing is deleted forcibly.
        "clean_file_forcibly_enable": False,
        "disk_max_used_space_ratio": 95,
        "store_path_root_dir": str(store_dir),
    }
    sends: list[dict[str, Any]] = []
    next_id = 0

    async def send(c: Client, i: int) -> dict[str, Any]:
        nonlocal next_id
        queue_id = i % QUEUES
        if i % 7 == 3:
            ids = list(range(next_id, next_id + 4))
            items = [(body(n), properties(KEYS=f"k{n} x{n}", TAGS="B")) for n in ids]
            ext = send_ext(TOPIC, queue_id, batch="true")
            r = await c.call(RC.SEND_BATCH_MESSAGE, ext, batch_body(items))
        else:
            ids = [next_id]
            ext = send_ext(TOPIC, queue_id, properties(KEYS=f"k{next_id}"))
            r = await c.call(RC.SEND_MESSAGE, ext, body(next_id))
        next_id += len(ids)
        out = {"ids": ids, "queue": queue_id, "code": r.code, "remark": r.remark, "used": used_ratio(mount)}
        if r.code == R.SUCCESS:
            out["offset"] = int(r.ext["queueOffset"])
        return out

    async with running(store_dir.parent, **settings) as (_ns, broker):
        c = await Client().connect(broker.port)
        # The filler takes all but FILLER_FREE_BYTES of what the store left free.
        free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
        filler = mount / "filler"
        with filler.open("wb") as f:
            chunk = b"\0" * (1024 * 1024)
            left = max(0, free - FILLER_FREE_BYTES)
            while left > 0:
                f.write(chunk[: min(left, len(chunk))])
                left -= len(chunk)
        in_a_row = 0
        for i in range(MAX_SENDS):
            s = await send(c, i)
            sends.append({**s, "phase": "filling"})
            in_a_row = in_a_row + 1 if s["code"] != R.SUCCESS else 0
            if in_a_row >= REFUSALS_IN_A_ROW:
                break
        filler.unlink()
        freed_at = time.monotonic()
        i = len(sends)
        resumed = 0
        while resumed < AFTER_RESUME and time.monotonic() - freed_at < RESUME_TIMEOUT_SECONDS:
            s = await send(c, i)
            i += 1
            sends.append({**s, "phase": "freed"})
            if s["code"] == R.SUCCESS:
                resumed += 1
            else:
                await asyncio.sleep(0.05)

        pulled: dict[int, list[list[int]]] = {}
        for q in range(QUEUES):
            got: list[list[int]] = []
            offset = 0
            for _ in range(10_000):
                r = await c.call(RC.PULL_MESSAGE, pull_ext("G", TOPIC, q, offset, suspendTimeoutMillis=0))
                if r.code != R.SUCCESS:
                    break
                for m in decode_messages(r.body):
                    got.append([m.queue_offset, int(m.body[:8])])
                offset = int(r.ext["nextBeginOffset"])
            pulled[q] = got
        acked = [n for s in sends if s["code"] == R.SUCCESS for n in s["ids"]]
        probes = acked[:: max(1, len(acked) // 20)]
        keys_found = {}
        for n in probes:
            r = await c.call(
                RC.QUERY_MESSAGE,
                {"topic": TOPIC, "key": f"k{n}", "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**62},
            )
            found = [int(m.body[:8]) for m in decode_messages(r.body)] if r.code == R.SUCCESS else []
            keys_found[str(n)] = found
        space = broker.store.space_status()
        await c.close()
    return {
        "mode": mode,
        "sends": sends,
        "pulled": pulled,
        "keys_found": keys_found,
        "space_after": [space.disk_full, space.used_ratio, space.dispatch_behind],
    }


def main() -> None:
    mount, mode, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    result = asyncio.run(scenario(mount, mode))
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
