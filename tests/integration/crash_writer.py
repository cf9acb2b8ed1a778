"""Child process for the crash tests: appends in SYNC_FLUSH mode from several threads and prints
one `ACK key physical_offset queue_id queue_offset` line per append the store reported done.
The parent kills it with SIGKILL at a moment of its choosing."""

from __future__ import annotations

import os
import random
import sys
import threading

from ferromq.store import FlushDiskType, MessageStore

SMALL = {
    "mapped_file_size_commitlog": 64 * 1024,
    "mapped_file_size_consume_queue": 20 * 100,
    "max_hash_slot_num": 1000,
    "max_index_num": 5000,
}


def main() -> None:
    root, round_no, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    store = MessageStore(root, flush_disk_type=FlushDiskType.SYNC_FLUSH, **SMALL)
    out_lock = threading.Lock()

    def ack(key: str, phys: int, qid: int, qoff: int) -> None:
        with out_lock:
            sys.stdout.write(f"ACK {key} {phys} {qid} {qoff}\n")
            sys.stdout.flush()

    def run(t: int) -> None:
        rng = random.Random(round_no * 100 + t)
        i = 0
        while True:
            if i % 10 == 9:
                keys = [f"r{round_no}-t{t}-b{i}-{j}" for j in range(5)]
                props = [f"KEYS\x01{k}\x02TAGS\x01batch" for k in keys]
                bodies = [k.encode() * rng.randint(1, 40) for k in keys]
                r = store.put_batch("Crash", t, bodies, props)
                for k, phys, j in zip(keys, r.physical_offsets, range(5), strict=True):
                    ack(k, phys, t, r.first_queue_offset + j)
            else:
                key = f"r{round_no}-t{t}-{i}"
                r = store.put("Crash", t, key.encode() * rng.randint(1, 60), keys=key, tags="single")
                ack(key, r.physical_offset, t, r.queue_offset)
            i += 1

    for t in range(threads):
        threading.Thread(target=run, args=(t,), daemon=True).start()
    print("READY", os.getpid(), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
