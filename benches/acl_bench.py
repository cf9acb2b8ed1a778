"""What the plain ACL costs on the send path: the same signed SEND_MESSAGE_V2 load against
`ferromq serve` with aclEnable=false and with aclEnable=true (an account allowed to publish, the
peer in no white list, so every request's signature and topic permission are checked), in
alternating rounds of one run. Prints msg/s and latency percentiles per round and the ratios
ACL on / ACL off (medians over rounds); writes JSON.

    .venv/bin/python benches/acl_bench.py [--seconds 5] [--rounds 3] [--size 1024]
        [--connections 4] [--inflight 16] [--quick] [--out bench-results/acl_bench.json]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from benchlib import cpu_seconds, free_port, serving, write_results  # noqa: E402
from hot_path_bench import Conn, _percentiles, measured_window  # noqa: E402

from ferromq.acl.guard import AclGuard  # noqa: E402
from ferromq.acl.plain import PlainAcl  # noqa: E402
from ferromq.acl.signing import Credentials  # noqa: E402
from ferromq.protocol.command import RemotingCommand, encode  # noqa: E402

TOPIC = "AclBenchTopic"
QUEUES = 8
ACCESS_KEY, SECRET_KEY = "benchProducer", "benchSecret1"
ADMIN_KEY, ADMIN_SECRET = "benchAdmin1", "benchAdminSecret"
PLAIN_ACL = f"""
globalWhiteRemoteAddresses:
  - 10.250.250.*
accounts:
  - accessKey: {ACCESS_KEY}
    secretKey: {SECRET_KEY}
    defaultTopicPerm: DENY
    topicPerms:
      - {TOPIC}=PUB
  - accessKey: {ADMIN_KEY}
    secretKey: {ADMIN_SECRET}
    admin: true
"""
POOL = 4096  # distinct signed frames (queue ids and unique keys), sent round robin
_OPAQUE_MARK = 999_999_999


class Frame:
    """One signed request, pre-rendered: only its opaque (not signed) is spliced in per send."""

    def __init__(self, cmd: RemotingCommand) -> None:
        self.cmd = cmd
        cmd.opaque = _OPAQUE_MARK
        raw = encode(cmd)
        header_len = int.from_bytes(raw[4:8], "big") & 0xFFFFFF
        header = raw[8 : 8 + header_len]
        at = header.index(b"%d" % _OPAQUE_MARK)
        self.head, self.tail = header[:at], header[at + len(b"%d" % _OPAQUE_MARK) :]
        self.body = raw[8 + header_len :]

    def header(self, opaque: int) -> bytes:
        return self.head + b"%d" % opaque + self.tail


def signed(code: int, ext: dict[str, str], body: bytes, keys: tuple[str, str]) -> RemotingCommand:
    cmd = RemotingCommand(code=code, ext=dict(ext), body=body)
    Credentials(*keys).apply(cmd.ext, cmd.body)
    return cmd


def send_frames(size: int) -> list[Frame]:
    body = b"x" * size
    born = str(int(time.time() * 1000))
    frames = []
    for i in range(POOL):
        props = f"TAGS\x01TagA\x02WAIT\x01true\x02UNIQ_KEY\x010A000001{i:024X}\x02"
        ext = {
            "a": "PID_acl_bench",
            "b": TOPIC,
            "c": "TBW102",
            "d": "4",
            "e": str(i % QUEUES),
            "f": "0",
            "g": born,
            "h": "0",
            "i": props,
            "j": "0",
            "k": "false",
            "m": "false",
        }
        frames.append(Frame(signed(310, ext, body, (ACCESS_KEY, SECRET_KEY))))
    return frames


async def load(port: int, frames: list[Frame], args: argparse.Namespace) -> dict[str, Any]:
    conns = []
    for _ in range(args.connections):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        conns.append(Conn(r, w))
    opaque = itertools.count(1)
    create = Frame(
        signed(
            17,
            {"topic": TOPIC, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES), "perm": "6"},
            b"",
            (ADMIN_KEY, ADMIN_SECRET),
        )
    )
    op = next(opaque)
    code, _, _ = await conns[0].send(create.header(op), create.body, op)
    if code != 0:
        raise SystemExit(f"UPDATE_AND_CREATE_TOPIC answered {code}")
    lat: list[float] = []
    errors: dict[int, int] = {}
    state = {"measure": False, "stop": False}
    next_frame = itertools.cycle(frames)
    total = [0]

    async def worker(conn: Conn) -> None:
        while not state["stop"]:
            frame = next(next_frame)
            op = next(opaque)
            t0 = time.perf_counter()
            code, _, _ = await conn.send(frame.header(op), frame.body, op)
            total[0] += 1
            if state["measure"]:
                if code == 0:
                    lat.append(time.perf_counter() - t0)
                else:
                    errors[code] = errors.get(code, 0) + 1

    tasks = [asyncio.create_task(worker(c)) for c in conns for _ in range(args.inflight)]
    elapsed = await measured_window(tasks, state, args)
    for c in conns:
        await c.close()
    return {
        "count": len(lat),
        "total": total[0],
        "msgs_per_s": len(lat) / elapsed,
        "errors": errors,
        **_percentiles(lat),
    }


def run_round(acl: bool, frames: list[Frame], args: argparse.Namespace, work: Path, n: int) -> dict[str, Any]:
    home = work / f"home-{n}-{'on' if acl else 'off'}"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    conf = home / "broker.conf"
    conf.write_text(
        f"brokerName=aclbench\nstorePathRootDir={home / 'store'}\n"
        f"mappedFileSizeCommitLog={256 * 1024 * 1024}\n"
        f"aclEnable={'true' if acl else 'false'}\nrocketmqHome={home}\n"
    )
    port = free_port()
    with serving(conf, home / "broker.log", port, free_port()) as broker:
        cpu0 = cpu_seconds(broker.pid)
        result = asyncio.run(load(port, frames, args))
        # The broker's CPU time per request (warm-up included): unlike msg/s it hardly moves when
        # other processes compete for the CPUs.
        result["cpu_us_per_msg"] = (cpu_seconds(broker.pid) - cpu0) / max(result["total"], 1) * 1e6
    return {"acl": acl, "round": n, **result}


def guard_cpu_us(frames: list[Frame], work: Path) -> float:
    """The ACL check alone, in this process: CPU microseconds per signed send (best of 3 runs of
    20,000; CPU time, so the neighbours' load does not count)."""
    home = work / "micro"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    acl = PlainAcl.locate(str(home), "conf/plain_acl.yml")
    acl.load()
    guard = AclGuard(acl)
    peer = SimpleNamespace(peer_host="127.0.0.1")
    cmds = [frame.cmd for frame in frames[:256]]
    n = 20_000

    def run() -> None:
        for i in range(n):
            guard(peer, cmds[i & 255])  # type: ignore[arg-type]

    return min(timeit.repeat(run, number=1, repeat=3, timer=time.process_time)) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--warmup", type=float, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--inflight", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 1 s rounds, 1 round")
    ap.add_argument("--out", default="bench-results/acl_bench.json")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.warmup, args.rounds = 1.0, 0.3, 1
    frames = send_frames(args.size)
    with tempfile.TemporaryDirectory(prefix="acl-bench-micro-") as tmp:
        micro = guard_cpu_us(frames, Path(tmp))
    print(f"the ACL check alone: {micro:.2f} us of CPU per signed {args.size}-byte send")
    rows = []
    print(
        f"{'acl':<5}{'round':>6}{'count':>9}{'msg/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}  errors"
    )
    with tempfile.TemporaryDirectory(prefix="acl-bench-") as tmp:
        for n in range(args.rounds):
            for acl in (False, True):
                r = run_round(acl, frames, args, Path(tmp), n)
                rows.append(r)
                print(
                    f"{'on' if acl else 'off':<5}{n:>6}{r['count']:>9}{r['msgs_per_s']:>10.0f}"
                    f"{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['p999_ms']:>10.2f}"
                    f"{r['cpu_us_per_msg']:>11.1f}  {r['errors'] or ''}",
                    flush=True,
                )

    def paired(key: str) -> float:
        """The median over rounds of (ACL on / ACL off) within each round: the two runs of a
        round are seconds apart, so they share the machine's load."""
        on = [r[key] for r in rows if r["acl"]]
        off = [r[key] for r in rows if not r["acl"]]
        return statistics.median(a / b for a, b in zip(on, off, strict=True))

    ratios = {
        "throughput_on_over_off": paired("msgs_per_s"),
        "p99_on_over_off": paired("p99_ms"),
        "cpu_per_msg_on_over_off": paired("cpu_us_per_msg"),
    }
    print(
        "ACL on / off (median of per-round ratios): "
        f"throughput x{ratios['throughput_on_over_off']:.3f}, p99 x{ratios['p99_on_over_off']:.3f}, "
        f"broker CPU per message x{ratios['cpu_per_msg_on_over_off']:.3f}"
    )
    params = {k: getattr(args, k) for k in ("seconds", "warmup", "rounds", "size", "connections", "inflight")}
    write_results(
        args.out,
        {"bench": "acl", "params": params, "guard_cpu_us_per_send": micro, "rows": rows, "ratios": ratios},
    )


if __name__ == "__main__":
    main()
