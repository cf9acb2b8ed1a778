"""Client side of e2e_bench.py, run in its own process: `produce` or `consume` through the official
RocketMQ C++ client (PyPI rocketmq 0.4.4). Prints one `RESULT {json}` line."""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer


def produce(namesrv: str, topic: str, n: int, size: int, threads: int) -> dict[str, object]:
    p = Producer("PID_bench")
    p.set_namesrv_addr(namesrv)
    p.start()
    warm = Message(topic)
    warm.set_body(b"warm")
    p.send_sync(warm)  # creates the topic before the threads race for its route
    body = b"x" * size
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors = [0] * threads

    def run(t: int) -> None:
        msg = Message(topic)
        msg.set_tags("bench")
        msg.set_body(body)
        for _ in range(n // threads):
            start = time.perf_counter()
            try:
                r = p.send_sync(msg)
            except Exception:  # the C++ client's own transport-lock timeouts under many threads
                errors[t] += 1
                continue
            if r.status != 0:
                errors[t] += 1
                continue
            latencies[t].append(time.perf_counter() - start)

    started = time.perf_counter()
    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - started
    p.shutdown()
    return {"elapsed": elapsed, "latencies": [x for lat in latencies for x in lat], "errors": sum(errors)}


def consume(namesrv: str, topic: str, n: int) -> dict[str, object]:
    got = [0]
    first: list[float] = []
    lock = threading.Lock()

    def on_message(msg: object) -> None:
        with lock:
            if not first:
                first.append(time.perf_counter())
            got[0] += 1

    c = PushConsumer("CID_bench_" + topic)
    c.set_namesrv_addr(namesrv)
    c.set_thread_count(4)
    c.set_message_batch_max_size(32)
    c.subscribe(topic, on_message)
    c.start()
    deadline = time.time() + 300
    while got[0] < n and time.time() < deadline:
        time.sleep(0.01)
    end = time.perf_counter()
    c.shutdown()
    return {"received": got[0], "elapsed": end - (first[0] if first else end)}


def main() -> None:
    mode, namesrv, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if mode == "produce":
        result = produce(namesrv, topic, n, int(sys.argv[5]), int(sys.argv[6]))
    else:
        result = consume(namesrv, topic, n)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
