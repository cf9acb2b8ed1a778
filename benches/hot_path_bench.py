"""The broker's hot path under a raw protocol load: send and pull throughput and latency against a
`ferromq serve` process, optionally profiled with py-spy.

A load generator (this file's `load` subcommand, in a child process so the broker is measured
alone) speaks the remoting protocol directly: it creates the topic, then per phase

* `send`: C connections x K requests in flight each (closed loop), SEND_MESSAGE_V2 (Java's short
  header) or SEND_MESSAGE (the C++ client's long header), JSON headers, a fresh UNIQ_KEY and a
  tag per message, for S seconds after a 1 s warm-up: msg/s and latency percentiles;
* `rate`: the same sends at a fixed rate (open loop, latency counted from the scheduled time),
  with `--live-consumer` while long-polling pullers commit offsets (a push consumer's traffic);
* `pull`: PULL_MESSAGE (32 per request), one puller per queue reading it from 0 to its end and
  over again (page cache), for S seconds after the warm-up: msg/s.

Each row also gives the broker's CPU time (all threads, from /proc) per message handled: on a
shared machine msg/s and latencies move with the neighbours' load, CPU per message hardly does.
`--baseline DIR` runs every case on another checkout's `python/` too (rows `base`, alternating
with `new` for `--repeat` rounds) and prints the ratios. `--scaling` runs every case with the
broker pinned to one core and to two (`taskset`; the load generator on the other cores) and
prints the 2-core/1-core ratios: how far the broker uses a second core. `--tls-cost` runs every
case with the load over plain TCP and over TLS and prints the tls/plain ratios. `--planes` runs
every case with the Python server (dataPlane=python) and the Rust data plane (dataPlane=rust) and
prints the rust/python ratios. `--table-topics` runs every case without and with the topic tiered
into its Delta table every second (tableTopics), by the tiering process (`tables`, the default)
and by a thread of the broker (`tables-thread`), and prints their ratios to plain.

`--bodies json` (with `--native-load --phases send`) sends, in turn, a pool of distinct JSON order
events of the message size (at least 4096 and 8 MiB of them, more than a Parquet dictionary page
holds; seeded: the same on every run; snappy compresses a page of them about 3x) instead of bodies
of b'x' (`same`, the default), which any Parquet writer dictionary-encodes to nothing: with
`--table-topics`, what tiering costs on traffic like a real producer's.

With `--profile DIR` py-spy records the broker during each phase (`--native` adds native
frames but pauses the broker per sample) and a text summary (the functions with the most own
samples) is written per phase.

    .venv/bin/python benches/hot_path_bench.py [--flush ASYNC_FLUSH,SYNC_FLUSH] [--sizes 1024,128]
        [--seconds 5] [--connections 4] [--inflight 16] [--rate 5000] [--profile DIR]
        [--baseline OTHER_CHECKOUT/python] [--repeat N] [--quick] [--bodies same|json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from benchlib import cpu_seconds, free_port, serving, write_results

from ferromq.remoting.tls import client_context

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TOPIC = "HotPathTopic"
QUEUES = 8
_PREFIX = struct.Struct(">ii")
_INT = struct.Struct(">i")

# -- load generator (child process) -----------------------------------------------------------


class Conn:
    """A pipelined client connection: frames out, replies matched by opaque."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.pending: dict[int, asyncio.Future[tuple[int, dict[str, Any], bytes]]] = {}
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                (length,) = _INT.unpack(await self.reader.readexactly(4))
                frame = await self.reader.readexactly(length)
                (tl,) = _INT.unpack_from(frame, 0)
                hl = tl & 0xFFFFFF
                h = orjson.loads(frame[4 : 4 + hl])
                fut = self.pending.pop(h["opaque"], None)
                if fut is not None and not fut.done():
                    fut.set_result((h["code"], h.get("extFields") or {}, frame[4 + hl :]))
        except (asyncio.IncompleteReadError, ConnectionError):
            for fut in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("closed"))

    def send(
        self, header: bytes, body: bytes, opaque: int
    ) -> asyncio.Future[tuple[int, dict[str, Any], bytes]]:
        fut: asyncio.Future[tuple[int, dict[str, Any], bytes]] = asyncio.get_running_loop().create_future()
        self.pending[opaque] = fut
        self.writer.write(_PREFIX.pack(4 + len(header) + len(body), len(header)) + header + body)
        return fut

    async def close(self) -> None:
        self.writer.close()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("closed"))


_opaque = itertools.count(1)


def _json_header(code: int, ext: dict[str, Any], opaque: int, lang: str = "JAVA") -> bytes:
    return orjson.dumps(
        {"code": code, "extFields": ext, "flag": 0, "language": lang, "opaque": opaque, "version": 399}
    )


class SendTemplate:
    """Builds SEND_MESSAGE(_V2) JSON headers by splicing the opaque, queue and UNIQ_KEY into
    pre-rendered bytes (the load generator must stay cheaper than the broker)."""

    def __init__(self, style: str) -> None:
        props = "TAGS\x01TagA\x02KEYS\x01key-1\x02WAIT\x01true\x02UNIQ_KEY\x01@UNIQ@\x02"
        if style == "v2":
            self.code, lang = 310, "JAVA"
            ext: dict[str, Any] = {
                "a": "PID_hot",
                "b": TOPIC,
                "c": "TBW102",
                "d": "4",
                "e": "@QID@",
                "f": "0",
                "g": "@BORN@",
                "h": "0",
                "i": props,
                "j": "0",
                "k": "false",
                "m": "false",
            }
        else:
            self.code, lang = 10, "CPP"
            ext = {
                "batch": "0",
                "bornTimestamp": "@BORN@",
                "defaultTopic": "TBW102",
                "defaultTopicQueueNums": 4,
                "flag": 0,
                "producerGroup": "PID_hot",
                "properties": props,
                "queueId": "@QID@",
                "reconsumeTimes": "0",
                "sysFlag": 0,
                "topic": TOPIC,
                "unitMode": "0",
            }
        raw = _json_header(self.code, ext, 999_999_999, lang)
        # Split the rendered header at its markers, in the order they occur.
        marks = sorted((raw.index(m), m) for m in (b"999999999", b"@QID@", b"@BORN@", b"@UNIQ@"))
        self.parts: list[bytes] = []
        self.order: list[bytes] = []
        at = 0
        for pos, m in marks:
            self.parts.append(raw[at:pos])
            self.order.append(m)
            at = pos + len(m)
        self.parts.append(raw[at:])
        self.born = str(int(time.time() * 1000)).encode()
        self.pid = os.getpid() & 0xFFFF

    def header(self, opaque: int, queue_id: int) -> bytes:
        values = {
            b"999999999": b"%d" % opaque,
            b"@QID@": b"%d" % queue_id,
            b"@BORN@": self.born,
            b"@UNIQ@": b"0A00000%04X%024X" % (self.pid, opaque),
        }
        p = self.parts
        out = [p[0]]
        for i, m in enumerate(self.order):
            out += (values[m], p[i + 1])
        return b"".join(out)


async def measured_window(
    tasks: list[asyncio.Task[None]], state: dict[str, bool], args: argparse.Namespace
) -> float:
    """Lets the load `tasks` run a warm-up, then counts for `args.seconds` (`state["measure"]`),
    stops them (`state["stop"]`) and returns the seconds counted."""
    await asyncio.sleep(args.warmup)
    state["measure"] = True
    started = time.perf_counter()
    await asyncio.sleep(args.seconds)
    state["measure"] = False
    elapsed = time.perf_counter() - started
    state["stop"] = True
    await asyncio.gather(*tasks)
    return elapsed


async def _connect(port: int, n: int, tls: bool = False) -> list[Conn]:
    # TLS as a Java client with -Dtls.enable=true: the broker's test-mode certificate, unchecked.
    ssl = client_context() if tls else None
    out = []
    for _ in range(n):
        r, w = await asyncio.open_connection("127.0.0.1", port, ssl=ssl)
        out.append(Conn(r, w))
    return out


async def _create_topic(conn: Conn) -> None:
    op = next(_opaque)
    ext = {"topic": TOPIC, "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES), "perm": "6"}
    code, _, _ = await conn.send(_json_header(17, ext, op), b"", op)
    if code != 0:
        raise SystemExit(f"UPDATE_AND_CREATE_TOPIC answered {code}")


async def _send_closed(conns: list[Conn], args: argparse.Namespace) -> dict[str, Any]:
    tpl = SendTemplate(args.style)
    body = b"x" * args.size
    lat: list[float] = []
    errors = collections.Counter[int]()
    state = {"measure": False, "stop": False}
    total = [0]

    async def worker(conn: Conn, w: int) -> None:
        q = w % QUEUES
        while not state["stop"]:
            op = next(_opaque)
            t0 = time.perf_counter()
            code, _, _ = await conn.send(tpl.header(op, q), body, op)
            total[0] += 1
            if state["measure"]:
                if code == 0:
                    lat.append(time.perf_counter() - t0)
                else:
                    errors[code] += 1

    tasks = [
        asyncio.create_task(worker(c, i * args.inflight + k))
        for i, c in enumerate(conns)
        for k in range(args.inflight)
    ]
    elapsed = await measured_window(tasks, state, args)
    return {
        "count": len(lat),
        "total": total[0],
        "elapsed": elapsed,
        "errors": dict(errors),
        **_percentiles(lat),
    }


async def _send_rate(conns: list[Conn], args: argparse.Namespace) -> dict[str, Any]:
    tpl = SendTemplate(args.style)
    body = b"x" * args.size
    lat: list[float] = []
    errors = collections.Counter[int]()
    pending: set[asyncio.Future[Any]] = set()
    interval = 1.0 / args.rate
    total = int(args.rate * (args.seconds + args.warmup))
    warm = int(args.rate * args.warmup)
    start = time.perf_counter()

    def done(fut: asyncio.Future[Any], due: float, i: int) -> None:
        pending.discard(fut)
        if i < warm or fut.exception() is not None:
            return
        code = fut.result()[0]
        if code == 0:
            lat.append(time.perf_counter() - due)
        else:
            errors[code] += 1

    consumers = await _live_consumers(args) if args.live_consumer else None
    for i in range(total):
        due = start + i * interval
        delay = due - time.perf_counter()
        if delay > 0.0005:
            await asyncio.sleep(delay)
        op = next(_opaque)
        fut = conns[i % len(conns)].send(tpl.header(op, i % QUEUES), body, op)
        pending.add(fut)
        fut.add_done_callback(lambda f, due=due, i=i: done(f, due, i))
    async with asyncio.timeout(60):
        while pending:
            await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - start - args.warmup
    out = {
        "count": len(lat),
        "total": total,
        "elapsed": elapsed,
        "errors": dict(errors),
        **_percentiles(lat),
    }
    if consumers is not None:
        out["consumed"] = await consumers()
    return out


async def _live_consumers(args: argparse.Namespace) -> Any:
    """One long-polling puller per queue on its own connection, from the queue's end, committing
    its offset with every pull (as a push consumer does). Returns a coroutine function that stops
    them and gives the number of messages they received."""
    (conn,) = await _connect(args.port, 1, args.tls)
    offsets = []
    for q in range(QUEUES):
        op = next(_opaque)
        _, ext, _ = await conn.send(_json_header(30, {"topic": TOPIC, "queueId": str(q)}, op), b"", op)
        offsets.append(int(ext["offset"]))
    got = [0]

    async def puller(q: int) -> None:
        offset = offsets[q]
        while True:
            op = next(_opaque)
            ext = {
                "consumerGroup": "CID_live",
                "topic": TOPIC,
                "queueId": str(q),
                "queueOffset": str(offset),
                "maxMsgNums": "32",
                "sysFlag": "7",  # commit offset, suspend (long polling), subscription in the request
                "commitOffset": str(offset),
                "suspendTimeoutMillis": "15000",
                "subscription": "*",
                "subVersion": "0",
                "expressionType": "TAG",
            }
            code, ext_out, _ = await conn.send(_json_header(11, ext, op), b"", op)
            if "nextBeginOffset" in ext_out:
                nxt = int(ext_out["nextBeginOffset"])
                if code == 0:
                    got[0] += nxt - offset
                offset = nxt

    tasks = [asyncio.create_task(puller(q)) for q in range(QUEUES)]

    async def stop() -> int:
        await conn.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        return got[0]

    return stop


async def _pull_all(conns: list[Conn], args: argparse.Namespace) -> dict[str, Any]:
    """Pullers, one per queue, read their queue from 0 to its end and start over, for the
    warm-up and then the measured seconds (the stored data is in the page cache)."""
    lat: list[float] = []
    counts = [0] * QUEUES
    total = [0]
    state = {"measure": False, "stop": False}

    async def puller(q: int) -> None:
        conn = conns[q % len(conns)]
        offset = 0
        while not state["stop"]:
            op = next(_opaque)
            ext = {
                "consumerGroup": "CID_hot",
                "topic": TOPIC,
                "queueId": str(q),
                "queueOffset": str(offset),
                "maxMsgNums": "32",
                "sysFlag": "4",  # subscription in the request, no suspend, no commit
                "commitOffset": "0",
                "suspendTimeoutMillis": "0",
                "subscription": "*",
                "subVersion": "0",
                "expressionType": "TAG",
            }
            t0 = time.perf_counter()
            code, ext_out, _ = await conn.send(_json_header(11, ext, op), b"", op)
            if code != 0:
                offset = 0  # the end of the queue: start over
                continue
            nxt = int(ext_out["nextBeginOffset"])
            total[0] += nxt - offset
            if state["measure"]:
                lat.append(time.perf_counter() - t0)
                counts[q] += nxt - offset
            offset = nxt

    tasks = [asyncio.create_task(puller(q)) for q in range(QUEUES)]
    elapsed = await measured_window(tasks, state, args)
    return {
        "count": sum(counts),
        "total": total[0],
        "elapsed": elapsed,
        "requests": len(lat),
        **_percentiles(lat),
    }


def _percentiles(lat: list[float]) -> dict[str, float]:
    if not lat:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "p999_ms": 0.0}
    s = sorted(lat)

    def p(q: float) -> float:
        return s[min(len(s) - 1, int(q * len(s)))] * 1000

    return {"p50_ms": p(0.50), "p99_ms": p(0.99), "p999_ms": p(0.999)}


async def _load(args: argparse.Namespace) -> dict[str, Any]:
    conns = await _connect(args.port, args.connections, args.tls)
    try:
        await _create_topic(conns[0])
        if args.phase == "send":
            return await _send_closed(conns, args)
        if args.phase == "rate":
            return await _send_rate(conns, args)
        return await _pull_all(conns, args)
    finally:
        for c in conns:
            await c.close()


def load_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("phase", choices=["send", "rate", "pull"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--style", choices=["v2", "v1"], default="v2")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--warmup", type=float, default=1)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--inflight", type=int, default=16)
    ap.add_argument("--rate", type=float, default=5000)
    ap.add_argument("--live-consumer", action="store_true")
    ap.add_argument("--tls", action="store_true")
    args = ap.parse_args(argv)
    try:
        import uvloop  # the load generator only; optional

        result = uvloop.run(_load(args))
    except ImportError:
        result = asyncio.run(_load(args))
    print("RESULT " + json.dumps(result), flush=True)


# -- driver -------------------------------------------------------------------------------------


def summarize_profile(raw: Path, out: Path, top: int = 40) -> None:
    """py-spy's collapsed stacks -> the functions with the most own and total samples."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        k = int(n)
        samples += k
        frames = stack.split(";")
        own[frames[-1]] += k
        for f in set(frames):
            total[f] += k
    lines = [f"{raw.name}: {samples} samples", "", f"top {top} by own samples:"]
    lines += [f"{n / samples * 100:6.1f}%  {f}" for f, n in own.most_common(top)]
    lines += ["", f"top {top} by total samples (the function and what it calls):"]
    lines += [f"{n / samples * 100:6.1f}%  {f}" for f, n in total.most_common(top)]
    out.write_text("\n".join(lines) + "\n")


_PLAIN_LAUNCH = "import sys; from ferromq.cli import main; sys.exit(main())"
# `ferromq` with uvloop's event loop (a trial: the broker does not depend on uvloop).
_UVLOOP_LAUNCH = (
    "import asyncio, sys, uvloop; asyncio.set_event_loop_policy(uvloop.EventLoopPolicy()); "
    "from ferromq.cli import main; sys.exit(main())"
)


class Variant:
    """One way of running the broker: its code (another checkout's `python/`, or this one), the
    CPUs it and the load generator are pinned to (`taskset -c`; None: not pinned), and whether the
    load connects over TLS."""

    def __init__(
        self,
        name: str,
        pythonpath: str | None = None,
        broker_cpus: str | None = None,
        load_cpus: str | None = None,
        tls: bool = False,
        conf: str = "",
    ) -> None:
        self.name = name
        self.pythonpath = pythonpath
        self.broker_cpus = broker_cpus
        self.load_cpus = load_cpus
        self.tls = tls
        self.conf = conf
        """broker.conf lines of this variant."""


def scaling_variants() -> list[Variant]:
    """The broker pinned to one core and to two, the load generator on the other cores (on a
    machine with fewer than three, it shares the broker's two)."""
    n = os.cpu_count() or 1
    if n < 2:
        raise SystemExit("--scaling needs at least 2 CPUs")
    rest = lambda first: f"{first}-{n - 1}" if first < n - 1 else str(first)  # noqa: E731
    return [
        Variant("1core", broker_cpus="0", load_cpus=rest(1)),
        Variant("2cores", broker_cpus="0-1", load_cpus=rest(2) if n >= 3 else "0-1"),
    ]


def native_loadgen() -> Path:
    """crates/loadgen's send load (cargo build --release, once per run)."""
    root = Path(__file__).resolve().parent.parent
    exe = root / "target" / "release" / "ferromq-loadgen"
    if not getattr(native_loadgen, "built", False):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "ferromq-loadgen"], cwd=root, check=True)
        native_loadgen.built = True  # type: ignore[attr-defined]
    return exe


def _pinned(cpus: str | None, cmd: list[str]) -> list[str]:
    return cmd if cpus is None else ["taskset", "-c", cpus, *cmd]


def run_case(
    flush: str, size: int, args: argparse.Namespace, work: Path, variant: Variant
) -> list[dict[str, Any]]:
    ns_port, port = free_port(), free_port()
    store = work / f"store-{flush}-{size}-{variant.name}"
    shutil.rmtree(store, ignore_errors=True)
    conf = work / f"broker-{flush}-{size}.conf"
    conf.write_text(
        f"brokerName=hot\nflushDiskType={flush}\nstorePathRootDir={store}\n"
        f"mappedFileSizeCommitLog={256 * 1024 * 1024}\n{variant.conf}"
    )
    env = dict(os.environ)
    if variant.pythonpath:
        # Another checkout's python/ (with a built extension) runs the broker: before/after in one run.
        env["PYTHONPATH"] = variant.pythonpath
    launcher = [str(Path(sys.executable).with_name("ferromq"))]
    if args.broker_uvloop:
        launcher = [sys.executable, "-c", _UVLOOP_LAUNCH]
    if args.broker_gc:
        launcher = [sys.executable, "-c", f"import gc; {args.broker_gc}; {_PLAIN_LAUNCH}"]
    results = []
    log = work / f"broker-{flush}-{size}.log"
    with serving(conf, log, port, ns_port, _pinned(variant.broker_cpus, launcher), env) as broker:
        phases = args.phases.split(",") if args.phases else ["send", "pull"] + (["rate"] if args.rate else [])
        for phase in phases:
            if phase == "send" and args.native_load:
                cmd = [str(native_loadgen()), "--port", str(port), "--size", str(size), "--topic", TOPIC]
                cmd += ["--bodies", args.bodies]
                cmd = _pinned(variant.load_cpus, cmd)
            else:
                cmd = [sys.executable, __file__, "load", phase, "--port", str(port), "--size", str(size)]
                cmd = _pinned(variant.load_cpus, cmd)
                cmd += ["--style", args.style, "--rate", str(args.rate)]
            cmd += ["--seconds", str(args.seconds), "--warmup", str(args.warmup)]
            cmd += ["--connections", str(args.connections), "--inflight", str(args.inflight)]
            if args.live_consumer and phase == "rate":
                cmd.append("--live-consumer")
            if variant.tls:
                if phase == "send" and args.native_load:
                    raise SystemExit("--native-load speaks plain TCP only")
                cmd.append("--tls")
            spy = None
            if args.profile:
                prof_dir = Path(args.profile)
                prof_dir.mkdir(parents=True, exist_ok=True)
                name = f"{args.tag}{variant.name}-{flush.split('_')[0].lower()}-{size}-{phase}"
                raw = prof_dir / f"{name}.collapsed"
                spy_cmd = [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(broker.pid)]
                spy_cmd += ["--format", "raw", "--rate", "250", "--function", "-o", str(raw)]
                # --native pauses the broker for each sample; the plain mode does not.
                spy_cmd.append("--native" if args.native else "--nonblocking")
                spy_log = open(work / f"{name}.py-spy.log", "w")
                spy = subprocess.Popen(spy_cmd, stdout=spy_log, stderr=subprocess.STDOUT)
                time.sleep(1.0)
            cpu0 = cpu_seconds(broker.pid)
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            res = None
            for ln in out.stdout.splitlines():
                if ln.startswith("RESULT "):
                    res = json.loads(ln[7:])
            tiered_after = None
            if res is not None and "tableTopics" in variant.conf:
                # Tiering's work on this phase's messages (warm-up included) counts too: the CPU is
                # read once the table holds them all (the broker does nothing else meanwhile).
                tiered_after = wait_tiered(store, int(res["total"]), time.monotonic() + 300)
                # The tiering thread's own CPU (the broker reports it): what the rows cost it,
                # without the noise of the rest of the broker's CPU.
                tier, maintain = tiering_cpu_seconds(port)
                res["tiering_cpu_us_per_row"] = tier / max(res["total"], 1) * 1e6
                res["maintain_cpu_us_per_row"] = maintain / max(res["total"], 1) * 1e6
            cpu = cpu_seconds(broker.pid) - cpu0
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
                spy_log.close()
                if not raw.exists():
                    print(f"py-spy wrote nothing: {(work / f'{name}.py-spy.log').read_text()[-500:]}")
                if raw.exists():
                    summarize_profile(raw, raw.with_suffix(".txt"))
                    if not args.keep_raw:
                        raw.unlink()
            if res is None:
                raise SystemExit(f"load {phase} failed: {out.stdout[-2000:]}{out.stderr[-2000:]}")
            # Broker CPU per message (all its threads; warm-up included on both sides): unlike
            # msg/s it hardly moves when other processes compete for the CPUs.
            res["cpu_us_per_msg"] = cpu / max(res["total"], 1) * 1e6
            res.update(
                variant=variant.name,
                flush=flush,
                size=size,
                phase=phase,
                bodies=args.bodies,
                msgs_per_s=res["count"] / res["elapsed"],
            )
            if tiered_after is not None:
                res["tiered_after_s"] = round(tiered_after, 2)
            results.append(res)
            print(_row(res), flush=True)
    return results


def tiering_cpu_seconds(port: int) -> tuple[float, float]:
    """The CPU the broker's tiering thread spent on its table topics since it started: on their
    rows, and on compacting (and vacuuming) their tables."""
    admin = [str(Path(sys.executable).with_name("ferromq")), "admin", "table-topics"]
    out = subprocess.run(
        [*admin, "-b", f"127.0.0.1:{port}", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    topics = json.loads(out.stdout)
    return sum(t["tierCpuSeconds"] for t in topics), sum(t["maintainCpuSeconds"] for t in topics)


def wait_tiered(store: Path, messages: int, deadline: float) -> float:
    """Seconds until the topic's table holds `messages` rows (SystemExit past `deadline`)."""
    from ferromq.tables.reader import describe, open_table

    started = time.monotonic()
    rows = 0
    while time.monotonic() < deadline:
        table = open_table(str(store / "tables"), TOPIC)
        rows = describe(table)["rows"] if table is not None else 0
        if rows >= messages:
            return time.monotonic() - started
        time.sleep(0.2)
    raise SystemExit(f"the table holds {rows:,} rows of {messages:,} after the wait")


HEAD = (
    f"{'variant':<9}{'flush':<7}{'size':>6}{'phase':>7}{'count':>9}{'msg/s':>10}"
    f"{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}{'cpu us/msg':>11}  errors"
)


def _row(r: dict[str, Any]) -> str:
    return (
        f"{r['variant']:<9}{r['flush'].split('_')[0]:<7}{r['size']:>6}{r['phase']:>7}{r['count']:>9}{r['msgs_per_s']:>10.0f}"
        f"{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['p999_ms']:>10.2f}"
        f"{r['cpu_us_per_msg']:>11.1f}  {r.get('errors') or ''}"
        + (f" consumed {r['consumed']}" if "consumed" in r else "")
        + (
            f" tiering {r['tiering_cpu_us_per_row']:.2f}"
            f" + compaction {r['maintain_cpu_us_per_row']:.2f} us/row"
            if "tiering_cpu_us_per_row" in r
            else ""
        )
    )


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "load":
        load_main(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flush", default="ASYNC_FLUSH,SYNC_FLUSH")
    ap.add_argument("--sizes", default="1024,128")
    ap.add_argument(
        "--bodies",
        choices=["same", "json"],
        default="same",
        help="same: bodies of b'x' (any Parquet writer encodes them to nothing); json: a pool of "
        "distinct JSON order events (>= 4096, >= 8 MiB) per size, sent in turn (what table topics "
        "cost on real traffic; crates/loadgen builds them: needs --native-load --phases send[,pull])",
    )
    ap.add_argument("--style", choices=["v2", "v1"], default="v2", help="v2: Java's header; v1: C++'s")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--warmup", type=float, default=1)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--inflight", type=int, default=16)
    ap.add_argument("--rate", type=float, default=5000, help="fixed-rate phase (0: skip)")
    ap.add_argument(
        "--live-consumer",
        action="store_true",
        help="rate phase: long-polling pullers per queue commit offsets meanwhile (a consumer's load)",
    )
    ap.add_argument("--profile", help="directory for py-spy summaries")
    ap.add_argument("--native", action="store_true", help="py-spy --native")
    ap.add_argument("--tag", default="", help="prefix of the profile file names")
    ap.add_argument("--keep-raw", action="store_true", help="keep py-spy's collapsed stacks")
    ap.add_argument(
        "--baseline", help="python/ dir of another checkout: each case runs on it too ('base' rows)"
    )
    ap.add_argument(
        "--scaling",
        action="store_true",
        help="each case with the broker pinned to 1 core and to 2 (taskset), the load on the others; "
        "prints the 2-core/1-core ratios",
    )
    ap.add_argument(
        "--tls-cost",
        action="store_true",
        help="each case with the load over plain TCP and over TLS (one permissive broker port); "
        "prints the tls/plain ratios",
    )
    ap.add_argument(
        "--planes",
        action="store_true",
        help="each case with dataPlane=python and dataPlane=rust; prints the rust/python ratios",
    )
    ap.add_argument(
        "--table-topics",
        action="store_true",
        help="each case without and with the bench topic tiered into its table (tableTopics, every "
        "second); prints the tables/plain ratios: what tiering adds to the broker's CPU per message",
    )
    ap.add_argument(
        "--table-file-mib",
        type=int,
        default=32,
        help="with --table-topics: tableTopicTargetFileBytes in MiB (default 32, not the broker's 128: "
        "a run of 30 s fills a few whole files per queue)",
    )
    ap.add_argument(
        "--table-min-rows",
        type=int,
        default=0,
        help="with --table-topics: tableTopicMinRows (0, the default: whole files; N: a commit per N "
        "rows, small files that compaction merges)",
    )
    ap.add_argument(
        "--table-compression",
        default="snappy",
        help="with --table-topics: the tables' codec (tableTopicCompression: snappy, lz4, zstd, none)",
    )
    ap.add_argument(
        "--native-load",
        action="store_true",
        help="the send phase from crates/loadgen (Rust, one thread: SEND_MESSAGE_V2 as --style v2) "
        "instead of this file's Python generator, which costs more CPU per message than the broker",
    )
    ap.add_argument("--phases", help="comma-separated phases to run (default send,pull and rate with --rate)")
    ap.add_argument("--broker-uvloop", action="store_true", help="run the broker on uvloop (a trial)")
    ap.add_argument(
        "--broker-gc", help="Python run in the broker before it starts, e.g. 'gc.disable()' (a trial)"
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs of each case (alternating variants)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default="bench-results/hot_path_bench.json")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.warmup = 1.0, 0.5
    if args.bodies == "json" and not (args.native_load and args.phases and "rate" not in args.phases):
        raise SystemExit("--bodies json: the native load builds the bodies; add --native-load --phases send")
    results: list[dict[str, Any]] = []
    print(
        f"raw {args.style} load, {args.connections} connections x {args.inflight} in flight, "
        f"{args.bodies} bodies"
    )
    print(HEAD, flush=True)
    with tempfile.TemporaryDirectory(prefix="ferromq-hot-") as tmp:
        variants = scaling_variants() if args.scaling else [Variant("new")]
        if args.tls_cost:
            # The same broker (permissive: plain and TLS on one port), the load without and with TLS.
            variants = [Variant("plain"), Variant("tls", tls=True)]
        if args.planes:
            variants = [Variant(plane, conf=f"dataPlane={plane}\n") for plane in ("python", "rust")]
        if args.table_topics:
            tables = f"tableTopics={TOPIC}\ntableTopicIntervalSeconds=1\ntableTopicMaxDelaySeconds=10\n"
            tables += f"tableTopicCompression={args.table_compression}\n"
            tables += f"tableTopicTargetFileBytes={args.table_file_mib << 20}\n"
            if args.table_min_rows:
                tables += f"tableTopicMinRows={args.table_min_rows}\n"
            # Tiered by a process of its own (the default, tableTopicProcess) and by a thread of
            # the broker: the broker's own CPU per message in each.
            variants = [
                Variant("plain"),
                Variant("tables", conf=tables),
                Variant("tables-thread", conf=tables + "tableTopicProcess=false\n"),
            ]
        if args.baseline:
            variants.insert(0, Variant("base", args.baseline))
        for flush in args.flush.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                for _ in range(args.repeat):
                    for variant in variants:
                        results.extend(run_case(flush, size, args, Path(tmp), variant))
    if args.baseline:
        print_ratios(results, "new", "base")
    if args.scaling:
        print_ratios(results, "2cores", "1core")
    if args.tls_cost:
        print_ratios(results, "tls", "plain")
    if args.planes:
        print_ratios(results, "rust", "python")
    if args.table_topics:
        print_ratios(results, "tables", "plain")
        print_ratios(results, "tables-thread", "plain")
    write_results(args.json, {"params": vars(args), "results": results})


def print_ratios(results: list[dict[str, Any]], over: str, under: str) -> None:
    print(f"\nratios {over}/{under} (medians of the repeats):")
    print(f"{'flush':<7}{'size':>6}{'phase':>7}{'msg/s':>8}{'p99':>8}{'cpu/msg':>9}")
    keys = sorted({(r["flush"], r["size"], r["phase"]) for r in results})
    for key in keys:
        by = {
            v: [r for r in results if (r["flush"], r["size"], r["phase"]) == key and r["variant"] == v]
            for v in (under, over)
        }
        if not by[under] or not by[over]:
            continue
        rate = _median([r["msgs_per_s"] for r in by[over]]) / _median([r["msgs_per_s"] for r in by[under]])
        p99 = _median([r["p99_ms"] for r in by[over]]) / max(_median([r["p99_ms"] for r in by[under]]), 1e-9)
        cpu = _median([r["cpu_us_per_msg"] for r in by[over]]) / _median(
            [r["cpu_us_per_msg"] for r in by[under]]
        )
        print(f"{key[0].split('_')[0]:<7}{key[1]:>6}{key[2]:>7}{rate:>7.2f}x{p99:>7.2f}x{cpu:>8.2f}x")


if __name__ == "__main__":
    main()
