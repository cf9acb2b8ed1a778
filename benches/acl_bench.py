"""What access control costs on the send path: the same signed SEND_MESSAGE_V2 load against
`ferromq serve` with no ACL, the plain ACL (aclEnable=true: an account allowed to publish, the peer
in no white list), ACL 2.0 (authentication and authorization on, a Normal user with an Allow on the
topic) and ACL 2.0 with 10,000 entries for that user (other topics' literal entries and prefixes),
in rounds of one run; and, with --java, Apache RocketMQ 5.3.3's broker with ACL 2.0 off and on under
the same load. Prints msg/s, latency percentiles and the broker's CPU per message per round, and the
ratios (medians of per-round ratios); writes JSON.

    .venv/bin/python benches/acl_bench.py [--seconds 5] [--rounds 3] [--size 1024] [--java]
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
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tools"))  # apache_rocketmq (--java)

from benchlib import cpu_seconds, free_port, serving, write_results  # noqa: E402
from hot_path_bench import Conn, _percentiles, measured_window  # noqa: E402

from ferromq.acl.guard import AclGuard  # noqa: E402
from ferromq.acl.plain import PlainAcl  # noqa: E402
from ferromq.acl.signing import Credentials  # noqa: E402
from ferromq.auth.model import (  # noqa: E402
    Acl,
    Action,
    Decision,
    Policy,
    PolicyEntry,
    PolicyType,
    Resource,
    ResourcePattern,
    ResourceType,
    User,
    UserType,
)
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


async def setup(port: int, provision: Sequence[RemotingCommand]) -> None:
    """The topic (created by the admin account, a Super user under ACL 2.0), then `provision`."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    conn = Conn(r, w)
    create = signed(
        17,
        {
            "topic": TOPIC,
            "defaultTopic": "TBW102",
            "readQueueNums": str(QUEUES),
            "writeQueueNums": str(QUEUES),
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "false",
        },
        b"",
        (ADMIN_KEY, ADMIN_SECRET),
    )
    for op, cmd in enumerate([create, *provision], 1):
        frame = Frame(cmd)
        code, _, _ = await conn.send(frame.header(op), frame.body, op)
        if code != 0:
            raise SystemExit(f"request {cmd.code} answered {code}")
    await conn.close()


async def load(port: int, frames: list[Frame], args: argparse.Namespace) -> dict[str, Any]:
    conns = []
    for _ in range(args.connections):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        conns.append(Conn(r, w))
    opaque = itertools.count(1)
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


# ACL 2.0: the bench user's entries (one, or 10,000 that a decision walks past) and the Super user
# that creates the topic.
ACL2_KEYS = (
    "authenticationEnabled=true\nauthorizationEnabled=true\n"
    f'initAuthenticationUser={{"username":"{ADMIN_KEY}","password":"{ADMIN_SECRET}"}}\n'
    "authenticationMetadataProvider=org.apache.rocketmq.auth.authentication.provider."
    "LocalAuthenticationMetadataProvider\n"
    "authorizationMetadataProvider=org.apache.rocketmq.auth.authorization.provider."
    "LocalAuthorizationMetadataProvider\n"
)
MODES = ("off", "plain", "acl2", "acl2-10k")


def acl2_entries(many: bool) -> list[PolicyEntry]:
    allow = PolicyEntry(Resource.topic(TOPIC), (Action.PUB,), (), Decision.ALLOW)
    if not many:
        return [allow]
    others = [
        PolicyEntry(Resource.topic(f"Other{i}"), (Action.PUB,), (), Decision.ALLOW) for i in range(9_900)
    ]
    prefixes = [
        PolicyEntry(
            Resource(ResourceType.TOPIC, f"Zz{i}", ResourcePattern.PREFIXED), (Action.ALL,), (), Decision.DENY
        )
        for i in range(99)
    ]
    return [*others, *prefixes, allow]


def acl2_provision(many: bool) -> list[RemotingCommand]:
    """The bench user and its ACL, made over the wire by the Super user (the same on both brokers)."""
    user = User(ACCESS_KEY, SECRET_KEY, UserType.NORMAL)
    acl = Acl(user.subject, (Policy(PolicyType.CUSTOM, tuple(acl2_entries(many))),))
    admin = (ADMIN_KEY, ADMIN_SECRET)
    return [
        signed(3001, {"username": ACCESS_KEY}, orjson.dumps(user.as_info()), admin),
        signed(3006, {"subject": user.subject}, orjson.dumps(acl.as_info()), admin),
    ]


def run_round(mode: str, frames: list[Frame], args: argparse.Namespace, work: Path, n: int) -> dict[str, Any]:
    home = work / f"home-{n}-{mode}"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    conf = home / "broker.conf"
    conf.write_text(
        f"brokerName=aclbench\nstorePathRootDir={home / 'store'}\n"
        f"mappedFileSizeCommitLog={256 * 1024 * 1024}\nrocketmqHome={home}\n"
        + ("aclEnable=true\n" if mode == "plain" else "")
        + (ACL2_KEYS if mode.startswith("acl2") else "")
    )
    provision = acl2_provision(mode == "acl2-10k") if mode.startswith("acl2") else []
    port = free_port()
    with serving(conf, home / "broker.log", port, free_port()) as broker:
        asyncio.run(setup(port, provision))
        cpu0 = cpu_seconds(broker.pid)
        result = asyncio.run(load(port, frames, args))
        # The broker's CPU time per request (warm-up included): unlike msg/s it hardly moves when
        # other processes compete for the CPUs.
        result["cpu_us_per_msg"] = (cpu_seconds(broker.pid) - cpu0) / max(result["total"], 1) * 1e6
    return {"broker": "ferromq", "mode": mode, "round": n, **result}


def run_java_round(
    acl2: bool, frames: list[Frame], args: argparse.Namespace, work: Path, n: int
) -> dict[str, Any]:
    """Apache RocketMQ 5.3.3's broker (its JVM's CPU) under the same load, ACL 2.0 off or on."""
    from apache_rocketmq import ROCKETMQ_5_VERSION, start_rocketmq

    root = work / f"java-{n}-{'acl2' if acl2 else 'off'}"
    conf = dict(line.split("=", 1) for line in ACL2_KEYS.strip().splitlines()) if acl2 else {}
    mq = start_rocketmq(
        root, {**conf, "mappedFileSizeCommitLog": str(256 * 1024 * 1024)}, version=ROCKETMQ_5_VERSION
    )
    try:
        port = int(mq.broker_addr.rsplit(":", 1)[1])
        asyncio.run(setup(port, acl2_provision(False) if acl2 else []))
        cpu0 = cpu_seconds(mq.broker_pid)
        result = asyncio.run(load(port, frames, args))
        result["cpu_us_per_msg"] = (cpu_seconds(mq.broker_pid) - cpu0) / max(result["total"], 1) * 1e6
    finally:
        mq.stop(kill=True)
    return {"broker": "rocketmq", "mode": "acl2" if acl2 else "off", "round": n, **result}


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
    ap.add_argument(
        "--java", action="store_true", help="also Apache RocketMQ 5.3.3's broker, ACL 2.0 off and on"
    )
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
        f"{'broker, ACL':<18}{'round':>6}{'count':>9}{'msg/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}"
        f"{'CPU us/msg':>11}  errors"
    )
    with tempfile.TemporaryDirectory(prefix="acl-bench-") as tmp:
        for n in range(args.rounds):
            plan: list[tuple[str, Any]] = [("ferromq", m) for m in MODES]
            if args.java:
                plan += [("rocketmq", False), ("rocketmq", True)]
            # Each round starts one step further along (and odd rounds run backwards), so no case is
            # always the first or the last of a round when the neighbours' load drifts.
            plan = plan[n % len(plan) :] + plan[: n % len(plan)]
            if n % 2:
                plan.reverse()
            for broker, mode in plan:
                if broker == "ferromq":
                    r = run_round(mode, frames, args, Path(tmp), n)
                else:
                    r = run_java_round(mode, frames, args, Path(tmp), n)
                rows.append(r)
                print(
                    f"{r['broker'] + ' ' + r['mode']:<18}{n:>6}{r['count']:>9}{r['msgs_per_s']:>10.0f}"
                    f"{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['p999_ms']:>10.2f}"
                    f"{r['cpu_us_per_msg']:>11.1f}  {r['errors'] or ''}",
                    flush=True,
                )

    def paired(key: str, a: tuple[str, str], b: tuple[str, str]) -> float | None:
        """The median over rounds of a / b within each round: the runs of a round are seconds
        apart, so they share the machine's load."""
        top = [r[key] for r in rows if (r["broker"], r["mode"]) == a]
        bottom = [r[key] for r in rows if (r["broker"], r["mode"]) == b]
        if not top or not bottom:
            return None
        return statistics.median(x / y for x, y in zip(top, bottom, strict=True))

    summary = {}
    print(
        f"\nmedians over rounds\n{'broker, ACL':<18}{'msg/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'CPU us/msg':>11}"
    )
    for case in dict.fromkeys((r["broker"], r["mode"]) for r in rows):
        these = [r for r in rows if (r["broker"], r["mode"]) == case]
        med = {
            k: statistics.median(r[k] for r in these)
            for k in ("msgs_per_s", "p50_ms", "p99_ms", "cpu_us_per_msg")
        }
        summary[" ".join(case)] = med
        print(
            f"{' '.join(case):<18}{med['msgs_per_s']:>10.0f}{med['p50_ms']:>9.2f}{med['p99_ms']:>9.2f}"
            f"{med['cpu_us_per_msg']:>11.1f}"
        )
    f = ("ferromq", "off")
    ratios = {
        "throughput_on_over_off": paired("msgs_per_s", ("ferromq", "plain"), f),
        "p99_on_over_off": paired("p99_ms", ("ferromq", "plain"), f),
        "cpu_per_msg_on_over_off": paired("cpu_us_per_msg", ("ferromq", "plain"), f),
        "acl2_cpu_per_msg_on_over_off": paired("cpu_us_per_msg", ("ferromq", "acl2"), f),
        "acl2_throughput_on_over_off": paired("msgs_per_s", ("ferromq", "acl2"), f),
        "acl2_p99_on_over_off": paired("p99_ms", ("ferromq", "acl2"), f),
        "acl2_throughput_10k_rules_over_1": paired(
            "msgs_per_s", ("ferromq", "acl2-10k"), ("ferromq", "acl2")
        ),
        "acl2_cpu_per_msg_10k_rules_over_1": paired(
            "cpu_us_per_msg", ("ferromq", "acl2-10k"), ("ferromq", "acl2")
        ),
        "java_acl2_cpu_per_msg_on_over_off": paired(
            "cpu_us_per_msg", ("rocketmq", "acl2"), ("rocketmq", "off")
        ),
        "acl2_cpu_per_msg_ferromq_over_java": paired(
            "cpu_us_per_msg", ("ferromq", "acl2"), ("rocketmq", "acl2")
        ),
    }
    for name, value in ratios.items():
        print(f"{name}: {'-' if value is None else f'x{value:.3f}'}")
    params = {
        k: getattr(args, k)
        for k in ("seconds", "warmup", "rounds", "size", "connections", "inflight", "java")
    }
    write_results(
        args.out,
        {
            "bench": "acl",
            "params": params,
            "guard_cpu_us_per_send": micro,
            "rows": rows,
            "summary": summary,
            "ratios": ratios,
        },
    )


if __name__ == "__main__":
    main()
