"""ferromq against Apache RocketMQ 4.9.7, side by side on this machine, driven by one Java load generator.

For every body size and flush mode, each broker in turn is started fresh with the same broker.conf
(flushDiskType, segment sizes, 8 queues, store in a temporary directory): ferromq as a `ferromq namesrv`
process plus a `ferromq broker -c broker.conf` process, Apache RocketMQ as a Java name server plus a Java
BrokerStartup JVM (tools/apache_rocketmq.py). The same load generator (benches/loadgen: the official
rocketmq-client 4.9.7 in one JVM, built with Maven on first use) then runs, per broker:

  warm     untimed produce load (both brokers get it, so a JIT-compiled broker is measured warm),
  produce  async sends with a bounded in-flight window at saturation for a fixed time: msg/s sent OK, and
           the broker's CPU microseconds per message (utime+stime of the broker process over the phase, its
           idle CPU rate measured before the first phase subtracted; waiting for a core does not count, so
           this figure survives a noisy machine),
  consume  a new push consumer group reads the produce topic from offset 0 until it saw every message,
  latency  per target rate (1k, 5k, 20k msg/s) a paced async producer and a push consumer in the same JVM:
           receive time minus the System.nanoTime() stamped into the body at send; p50/p99/p99.9,
           the achieved rate (a rate the broker could not sustain is marked with `*`) and the broker's CPU per
           message (its send and its delivery),
  RSS      VmHWM (peak) and VmRSS at the end of the broker process (sampled every 0.5 s as well), its
           anonymous and file-backed parts (mmap'd CommitLog pages count as file-backed RSS), CPU seconds.

It prints one table, the ratios ferromq/RocketMQ from this run and the issue's targets, and writes
benches/results/vs_rocketmq.json and benches/results/vs_rocketmq.png. The brokers take turns first
(ferromq first in even cases, RocketMQ first in odd ones) so slow drift on a shared machine hits both.

    .venv/bin/python benches/vs_rocketmq.py [--quick | --smoke] [--sizes 128,1024] [--flush ASYNC_FLUSH]

Time: full (2 sizes x 2 flush modes x 2 brokers, 8 broker starts) about 13 minutes; --quick (1 KiB,
both flush modes, short phases) about 3 minutes; --smoke (a few hundred messages per broker, no plot
needed) about 1 minute; the first run adds the Maven builds (seconds with a warm ~/.m2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tools"))

import apache_rocketmq  # noqa: E402  (tools/ is not a package)
from benchlib import ratio  # noqa: E402

LOADGEN_DIR = HERE / "loadgen"
LOADGEN_JAR = LOADGEN_DIR / "target" / "ferromq-loadgen.jar"
RESULTS = HERE / "results"
BROKERS = ("ferromq", "rocketmq")
FLUSH_MODES = ("ASYNC_FLUSH", "SYNC_FLUSH")
START_TIMEOUT = 120.0
STOP_TIMEOUT = 60.0
RSS_SAMPLE_SECONDS = 0.5

# Settings per mode: (sizes, flush modes, warm s, warm-up s, produce s, rates, s per rate, produce cap).
PRESETS: dict[str, dict[str, Any]] = {
    "full": {
        "sizes": [128, 1024],
        "flush": list(FLUSH_MODES),
        "warm_seconds": 10,
        "warmup": 2,
        "produce_seconds": 15,
        "rates": [1000, 5000, 20000],
        "rate_seconds": 10,
        "produce_max": 0,
    },
    "quick": {
        "sizes": [1024],
        "flush": list(FLUSH_MODES),
        "warm_seconds": 3,
        "warmup": 1,
        "produce_seconds": 5,
        "rates": [1000, 5000, 20000],
        "rate_seconds": 3,
        "produce_max": 0,
    },
    "smoke": {
        "sizes": [128],
        "flush": ["ASYNC_FLUSH"],
        "warm_seconds": 0,
        "warmup": 0,
        "produce_seconds": 30,
        "rates": [500],
        "rate_seconds": 1,
        "produce_max": 300,
    },
}


# -- environment ----------------------------------------------------------------------------------


def _run(cmd: list[str]) -> str | None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=REPO)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (r.stdout or r.stderr).rstrip() if r.returncode == 0 else None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def environment() -> dict[str, Any]:
    cpu_model = None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    mem = next((ln for ln in (_read("/proc/meminfo") or "").splitlines() if ln.startswith("MemTotal")), "")
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30).stderr
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "mem_total": mem.split(":", 1)[-1].strip() or None,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "java": java.splitlines()[0] if java else None,
        "rocketmq_version": apache_rocketmq.ROCKETMQ_VERSION,
        "git_commit": _run(["git", "rev-parse", "HEAD"]),
        "git_dirty": None if status is None else bool(status),
        # Others may be editing the checkout: which tracked files differed from the commit.
        "git_dirty_files": None if status is None else [ln[3:] for ln in status.splitlines()],
        "loadavg_at_start": _read("/proc/loadavg"),
    }


# -- the load generator ---------------------------------------------------------------------------


def build_loadgen() -> Path:
    """`mvn package` when the jar is missing or was built from other sources."""
    return apache_rocketmq.maven_package(LOADGEN_DIR, LOADGEN_JAR)


def run_loadgen(namesrv: str, work: Path, opts: dict[str, Any], timeout: int) -> dict[str, Any]:
    """One JVM per case; returns its RESULT lines by phase, FAIL lines and exit code."""
    logs = work / "loadgen-logs"
    logs.mkdir(parents=True, exist_ok=True)
    cmd = [
        "java",
        "-Xms1g",
        "-Xmx1g",
        f"-Drocketmq.client.logRoot={logs}",
        "-jar",
        str(LOADGEN_JAR),
        f"namesrv={namesrv}",
        f"timeout={timeout}",
        *(f"{k}={v}" for k, v in opts.items()),
    ]
    out_path, err_path = work / "loadgen.out", work / "loadgen.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            # Also on Ctrl-C: the JVM is in its own process group, which only it and its children use.
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        if code is None:
            code = proc.returncode
    phases: dict[str, Any] = {"latency": []}
    for line in out_path.read_text(errors="replace").splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT ") :])
            if r["phase"] == "latency":
                phases["latency"].append(r)
            else:
                phases[r["phase"]] = r
    stderr = err_path.read_text(errors="replace")
    phases["failures"] = [ln[5:] for ln in stderr.splitlines() if ln.startswith("FAIL ")]
    phases["exit_code"] = code
    if code != 0 and not phases["failures"]:
        phases["failures"] = [f"exit code {code}: {stderr[-1500:]}"]
    return phases


# -- brokers --------------------------------------------------------------------------------------


def broker_conf(flush: str, store: Path) -> dict[str, str]:
    """The keys both brokers get (ferromq ignores, with a warning, the ones it has no use for)."""
    return {
        "brokerClusterName": "BenchCluster",
        "brokerName": "bench",
        "brokerId": "0",
        "brokerIP1": "127.0.0.1",
        "brokerRole": "ASYNC_MASTER",
        "storePathRootDir": str(store),
        "storePathCommitLog": str(store / "commitlog"),
        "flushDiskType": flush,
        "defaultTopicQueueNums": "8",
        "autoCreateTopicEnable": "true",
        "autoCreateSubscriptionGroup": "true",
        # RocketMQ's defaults, written out so both brokers surely use the same segments.
        "mappedFileSizeCommitLog": str(1 << 30),
        "mappedFileSizeConsumeQueue": str(300_000 * 20),
        # Nothing is deleted while the benchmark runs.
        "fileReservedTime": "72",
        "diskMaxUsedSpaceRatio": "95",
    }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ferromq_executable() -> str:
    exe = Path(sys.executable).with_name("ferromq")
    return str(exe) if exe.exists() else "ferromq"


def _stop(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM by PID, bounded wait, then SIGKILL; the exit code, None when it had to be killed."""
    if proc.poll() is not None:
        return proc.returncode
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        return None


@dataclass
class Running:
    namesrv: str
    broker_pid: int
    log_errors: list[str] = field(default_factory=list)
    stop_exit: int | None = None


@contextlib.contextmanager
def ferromq_broker(work: Path, conf: dict[str, str]) -> Iterator[Running]:
    """`ferromq namesrv` and `ferromq broker -c broker.conf`, two processes; yields once registered."""
    ns_port, port = free_port(), free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    lines = {**conf, "listenPort": str(port), "namesrvAddr": namesrv}
    (work / "broker.conf").write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    procs: list[subprocess.Popen[bytes]] = []
    running = Running(namesrv, -1)
    try:
        with open(work / "namesrv.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [ferromq_executable(), "namesrv", "--port", str(ns_port)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
        with open(work / "broker.log", "wb") as log:
            broker = subprocess.Popen(
                [ferromq_executable(), "broker", "-c", str(work / "broker.conf")],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        procs.append(broker)
        running.broker_pid = broker.pid
        deadline = time.monotonic() + START_TIMEOUT
        while not apache_rocketmq.broker_registered(namesrv, f"127.0.0.1:{port}"):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                tail = (work / "broker.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"ferromq did not start in {work}:\n{tail}")
            time.sleep(0.1)
        yield running
    finally:
        # Broker first (it unregisters from the name server), then the name server.
        for p in reversed(procs):
            code = _stop(p)
            if p is procs[-1] and len(procs) == 2:
                running.stop_exit = code
        text = (work / "broker.log").read_text(errors="replace") if (work / "broker.log").exists() else ""
        running.log_errors = [
            ln for ln in text.splitlines() if " ERROR " in ln or ln.startswith("Traceback")
        ][:20]


@contextlib.contextmanager
def rocketmq_broker(work: Path, conf: dict[str, str]) -> Iterator[Running]:
    mq = apache_rocketmq.start_rocketmq(work, conf, timeout=START_TIMEOUT)
    running = Running(mq.namesrv, mq.broker_pid)
    try:
        yield running
    finally:
        mq.stop()
        running.stop_exit = mq.broker_exit
        running.log_errors = mq.log_errors()[:20]


class RssSampler:
    """Polls /proc/<pid>/status; keeps the largest VmRSS and RssAnon seen, and CPU time."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.max_rss_kib = 0
        self.max_anon_kib = 0
        self.last: dict[str, int] = {}
        self.cpu_at_start: float | None = None
        self.cpu_at_end: float | None = None
        self.sched_at_start = self.sched_at_end = (0.0, 0.0)
        self.loadavg_at_start: str | None = None
        self.loadavg_at_end: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def status(self) -> dict[str, int]:
        found: dict[str, int] = {}
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return found
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                found[key] = int(value.split()[0])
        return found

    def cpu_seconds(self) -> float | None:
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        # utime and stime are fields 14 and 15 of stat; index 11 and 12 after the ")".
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def schedstat(self) -> tuple[float, float]:
        """Seconds on a CPU and seconds runnable but waiting for one, summed over the threads alive now;
        a large wait share means the broker was starved by other processes, not slow itself."""
        run = wait = 0
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return 0.0, 0.0
        for tid in tids:
            try:
                fields = Path(f"/proc/{self.pid}/task/{tid}/schedstat").read_text().split()
            except OSError:
                continue
            run += int(fields[0])
            wait += int(fields[1])
        return run / 1e9, wait / 1e9

    def sample(self) -> None:
        s = self.status()
        if s:
            self.last = s
            self.max_rss_kib = max(self.max_rss_kib, s.get("VmRSS", 0))
            self.max_anon_kib = max(self.max_anon_kib, s.get("RssAnon", 0))

    def _loop(self) -> None:
        while not self._stop.wait(RSS_SAMPLE_SECONDS):
            self.sample()

    def __enter__(self) -> RssSampler:
        self.sample()
        self.cpu_at_start = self.cpu_seconds()
        self.sched_at_start = self.schedstat()
        self.loadavg_at_start = _read("/proc/loadavg")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()
        self.cpu_at_end = self.cpu_seconds()
        self.sched_at_end = self.schedstat()
        self.loadavg_at_end = _read("/proc/loadavg")

    def result(self) -> dict[str, Any]:
        mib = 1 / 1024
        cpu = None
        if self.cpu_at_start is not None and self.cpu_at_end is not None:
            cpu = round(self.cpu_at_end - self.cpu_at_start, 2)
        return {
            "peak_mib": round(max(self.last.get("VmHWM", 0), self.max_rss_kib) * mib, 1),
            "end_mib": round(self.last.get("VmRSS", 0) * mib, 1),
            "anon_peak_mib": round(self.max_anon_kib * mib, 1),
            "anon_end_mib": round(self.last.get("RssAnon", 0) * mib, 1),
            "file_end_mib": round(self.last.get("RssFile", 0) * mib, 1),
            "cpu_seconds_during_load": cpu,
            # Over the threads alive at both ends: on-CPU time and time spent runnable in the run queue.
            "sched_run_seconds": round(self.sched_at_end[0] - self.sched_at_start[0], 2),
            "sched_wait_seconds": round(self.sched_at_end[1] - self.sched_at_start[1], 2),
            "loadavg_at_start": self.loadavg_at_start,
            "loadavg_at_end": self.loadavg_at_end,
        }


def run_case(
    broker: str, flush: str, size: int, preset: dict[str, Any], args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    work.mkdir(parents=True)
    conf = broker_conf(flush, work / "store")
    starter = ferromq_broker if broker == "ferromq" else rocketmq_broker
    opts: dict[str, Any] = {
        "prefix": f"Bench{size}",
        "size": size,
        "queues": 8,
        "phases": "warm,produce,consume,latency" if preset["warm_seconds"] else "produce,consume,latency",
        "mode": args.mode,
        "threads": args.threads,
        "window": args.window,
        "warm_seconds": preset["warm_seconds"],
        "warmup": preset["warmup"],
        "produce_seconds": preset["produce_seconds"],
        "produce_max": preset["produce_max"],
        "rates": ",".join(str(r) for r in preset["rates"]),
        "rate_seconds": preset["rate_seconds"],
        "consume_timeout": 120,
    }
    budget = (
        preset["warm_seconds"]
        + preset["warmup"]
        + preset["produce_seconds"]
        + 120
        + len(preset["rates"]) * (3 * (preset["warmup"] + preset["rate_seconds"]) + 140)
    )
    print(f"-- {broker} {flush} {size} B: starting", flush=True)
    started = time.monotonic()
    with starter(work, conf) as running:
        start_seconds = time.monotonic() - started
        with RssSampler(running.broker_pid) as rss:
            gen = run_loadgen(running.namesrv, work, {**opts, "broker_pid": running.broker_pid}, budget)
    result = {
        "broker": broker,
        "flush": flush,
        "size": size,
        "start_seconds": round(start_seconds, 2),
        "warm": gen.get("warm"),
        "produce": gen.get("produce"),
        "consume": gen.get("consume"),
        "latency": gen["latency"],
        "rss": rss.result(),
        "loadgen_exit": gen["exit_code"],
        "loadgen_failures": gen["failures"],
        "broker_log_errors": running.log_errors,
        "broker_stop_exit": running.stop_exit,
        "broker_conf": conf,
    }
    produced = (result["produce"] or {}).get("msg_per_s", 0)
    consumed = (result["consume"] or {}).get("msg_per_s", 0)
    print(
        f"   produce {produced:,.0f}/s  consume {consumed:,.0f}/s"
        f"  rss peak {result['rss']['peak_mib']} MiB  failures {len(gen['failures'])}",
        flush=True,
    )
    if not args.keep:
        shutil.rmtree(work / "store", ignore_errors=True)
    return result


# -- report ---------------------------------------------------------------------------------------


def best_of(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per (broker, flush, size): the highest produce and consume rates and, per target rate,
    the latency run with the lowest p99, each from whichever repeat had it. Interference from other
    processes only ever makes a number worse, so on a shared machine the best repeat is the cleanest.
    RSS and CPU come from the run with the highest peak RSS (the conservative one)."""
    out: list[dict[str, Any]] = []
    keys = sorted(
        {(r["flush"], r["size"], r["broker"]) for r in runs}, key=lambda k: (k[0], k[1], BROKERS.index(k[2]))
    )
    for flush, size, broker in keys:
        same = [r for r in runs if (r["flush"], r["size"], r["broker"]) == (flush, size, broker)]
        if len(same) == 1:
            out.append({**same[0], "repeats": 1})
            continue

        def rate(r: dict[str, Any], phase: str) -> float:
            return float((r[phase] or {}).get("msg_per_s") or 0.0)

        best = dict(max(same, key=lambda r: r["rss"]["peak_mib"]))
        best["produce"] = max(same, key=lambda r: rate(r, "produce"))["produce"]
        best["consume"] = max(same, key=lambda r: rate(r, "consume"))["consume"]
        latency = []
        for target in sorted({lat["target_rate"] for r in same for lat in r["latency"]}):
            found = [lat for r in same for lat in r["latency"] if lat["target_rate"] == target]
            latency.append(
                min(found, key=lambda lat: float("inf") if lat["p99_ms"] is None else lat["p99_ms"])
            )
        best["latency"] = latency
        best["loadgen_failures"] = [f for r in same for f in r["loadgen_failures"]]
        best["broker_log_errors"] = [e for r in same for e in r["broker_log_errors"]]
        best["repeats"] = len(same)
        out.append(best)
    return out


def _lat(case: dict[str, Any], rate: int) -> dict[str, Any] | None:
    return next((r for r in case["latency"] if r["target_rate"] == rate), None)


def ratios(results: list[dict[str, Any]], rates: list[int]) -> list[dict[str, Any]]:
    out = []
    for flush in FLUSH_MODES:
        for size in sorted({r["size"] for r in results}):
            by = {r["broker"]: r for r in results if r["flush"] == flush and r["size"] == size}
            if len(by) != 2:
                continue
            fm, rm = by["ferromq"], by["rocketmq"]
            row: dict[str, Any] = {
                "flush": flush,
                "size": size,
                "produce": ratio(
                    (fm["produce"] or {}).get("msg_per_s"), (rm["produce"] or {}).get("msg_per_s")
                ),
                "consume": ratio(
                    (fm["consume"] or {}).get("msg_per_s"), (rm["consume"] or {}).get("msg_per_s")
                ),
                "cpu_per_msg": ratio(_cpu_per_msg(fm["produce"]), _cpu_per_msg(rm["produce"])),
                "rss_peak": ratio(fm["rss"]["peak_mib"], rm["rss"]["peak_mib"]),
                "rss_anon_peak": ratio(fm["rss"]["anon_peak_mib"], rm["rss"]["anon_peak_mib"]),
            }
            for rate in rates:
                a, b = _lat(fm, rate), _lat(rm, rate)
                row[f"p99_at_{rate}"] = ratio(a and a["p99_ms"], b and b["p99_ms"])
                row[f"cpu_per_msg_at_{rate}"] = ratio(_cpu_per_msg(a), _cpu_per_msg(b))
            out.append(row)
    return out


def _cpu_per_msg(phase: dict[str, Any] | None) -> float | None:
    """Broker CPU microseconds per message of a load generator phase (idle CPU subtracted)."""
    return None if phase is None else phase.get("broker_cpu_us_per_msg")


def targets(rat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets: produce >= 1.0x RocketMQ, p99 at 5k msg/s <= RocketMQ's."""
    out = []
    for r in rat:
        prod, p99 = r["produce"], r.get("p99_at_5000")
        out.append(
            {
                "flush": r["flush"],
                "size": r["size"],
                "produce_ge_1x": None if prod is None else prod >= 1.0,
                "p99_at_5k_le_rocketmq": None if p99 is None else p99 <= 1.0,
                "cpu_per_msg_le_half": None if r["cpu_per_msg"] is None else r["cpu_per_msg"] <= 0.5,
            }
        )
    return out


def _rate_label(rate: int) -> str:
    return f"{rate // 1000}k" if rate % 1000 == 0 else str(rate)


def _fmt_rate(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _fmt_ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def table(results: list[dict[str, Any]], rates: list[int]) -> str:
    head = ["broker", "flush", "size", "produce/s", "cpu us/msg", "consume/s"]
    head += [f"@{_rate_label(r)} p50/p99/p99.9 ms" for r in rates]
    head += ["RSS peak", "RSS end", "anon peak", "cpu s", "run/queued s"]
    rows = [head]
    for c in results:
        row = [
            c["broker"],
            c["flush"],
            str(c["size"]),
            _fmt_rate((c["produce"] or {}).get("msg_per_s")),
            _fmt_ms(_cpu_per_msg(c["produce"])),
            _fmt_rate((c["consume"] or {}).get("msg_per_s")),
        ]
        for rate in rates:
            lat = _lat(c, rate)
            if lat is None:
                row.append("-")
                continue
            cell = "/".join(_fmt_ms(lat[k]) for k in ("p50_ms", "p99_ms", "p999_ms"))
            if not lat["sustained"]:
                cell += f" *{lat['achieved_rate']:,.0f}/s"
            row.append(cell)
        rss = c["rss"]
        row += [f"{rss['peak_mib']:.0f} MiB", f"{rss['end_mib']:.0f} MiB", f"{rss['anon_peak_mib']:.0f} MiB"]
        row.append(str(rss["cpu_seconds_during_load"]))
        row.append(f"{rss['sched_run_seconds']:.1f}/{rss['sched_wait_seconds']:.1f}")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def ratio_table(rat: list[dict[str, Any]], rates: list[int]) -> str:
    head = ["flush", "size", "produce", "cpu/msg", "consume"] + [f"p99@{_rate_label(r)}" for r in rates]
    head += [f"cpu/msg@{_rate_label(r)}" for r in rates] + ["RSS peak", "anon peak"]
    rows = [head]
    for r in rat:
        cells = [r["flush"], str(r["size"]), r["produce"], r.get("cpu_per_msg"), r["consume"]]
        cells += [r.get(f"p99_at_{rate}") for rate in rates]
        cells += [r.get(f"cpu_per_msg_at_{rate}") for rate in rates] + [r["rss_peak"], r["rss_anon_peak"]]
        rows.append([c if isinstance(c, str) else ("-" if c is None else f"{c:.2f}x") for c in cells])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def plot(results: list[dict[str, Any]], rates: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    cases = sorted({(r["flush"], r["size"]) for r in results})
    labels = [f"{f.split('_')[0]}\n{s} B" for f, s in cases]
    colors = {"ferromq": "tab:orange", "rocketmq": "tab:blue"}
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))

    def case(broker: str, flush: str, size: int) -> dict[str, Any] | None:
        return next(
            (r for r in results if (r["broker"], r["flush"], r["size"]) == (broker, flush, size)), None
        )

    def bars(ax: Any, value: Any, title: str, unit: str, anon: Any = None) -> None:
        width = 0.38
        for i, broker in enumerate(BROKERS):
            found = [case(broker, f, s) for f, s in cases]
            xs = [k + (i - 0.5) * width for k in range(len(cases))]
            ax.bar(xs, [value(c) if c else 0 for c in found], width, label=broker, color=colors[broker])
            if anon is not None:
                # The anonymous part of the peak drawn over it; the rest is file-backed (mmap'd store files).
                ax.bar(xs, [anon(c) if c else 0 for c in found], width * 0.5, color="black", alpha=0.55)
        ax.set_xticks(range(len(cases)), labels)
        ax.set_title(title)
        ax.set_ylabel(unit)
        ax.legend()

    bars(axes[0][0], lambda c: (c["produce"] or {}).get("msg_per_s") or 0, "produce at saturation", "msg/s")
    bars(axes[0][1], lambda c: (c["consume"] or {}).get("msg_per_s") or 0, "consume from offset 0", "msg/s")
    bars(
        axes[1][1],
        lambda c: c["rss"]["peak_mib"],
        "broker RSS peak (VmHWM); black: anonymous part (peak RssAnon)",
        "MiB",
        anon=lambda c: c["rss"]["anon_peak_mib"],
    )
    ax = axes[1][0]
    styles = ["-", "--", ":", "-."]
    for k, (f, s) in enumerate(cases):
        for broker in BROKERS:
            c = case(broker, f, s)
            pts = [lat for lat in (c["latency"] if c else []) if lat["p99_ms"] is not None]
            if not pts:
                continue
            xs, ys = [lat["target_rate"] for lat in pts], [lat["p99_ms"] for lat in pts]
            ax.plot(xs, ys, styles[k % len(styles)], marker="o", color=colors[broker])
            ax.lines[-1].set_label(f"{broker} {f.split('_')[0]} {s} B")
            missed = [lat for lat in pts if not lat["sustained"]]
            ax.plot([m["target_rate"] for m in missed], [m["p99_ms"] for m in missed], "kx", markersize=10)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.set_xticks(rates, [_rate_label(r) for r in rates])
    ax.set_title("end-to-end p99 latency at a paced rate (x: rate not sustained)")
    ax.set_xlabel("target msg/s")
    ax.set_ylabel("ms")
    ax.legend(fontsize=7)
    fig.suptitle("ferromq vs Apache RocketMQ 4.9.7, official Java client 4.9.7 as load generator")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="ferromq vs Apache RocketMQ 4.9.7 on this machine, same broker.conf, same Java load "
        "generator. Time: full ~13 min; --quick ~3 min; --smoke ~1 min (plus Maven builds on first use).",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="1 KiB only, short phases (~3 min)")
    mode.add_argument("--smoke", action="store_true", help="a few hundred messages per broker (~1 min)")
    p.add_argument("--sizes", help="body sizes, e.g. 128,1024 (default: the preset's)")
    p.add_argument("--flush", help="flush modes, e.g. ASYNC_FLUSH,SYNC_FLUSH (default: the preset's)")
    p.add_argument("--brokers", default=",".join(BROKERS), help="ferromq,rocketmq (default both)")
    p.add_argument("--mode", choices=["async", "sync"], default="async", help="saturation sends (async)")
    p.add_argument("--window", type=int, default=512, help="in-flight bound of async sends (512)")
    p.add_argument("--threads", type=int, default=16, help="sender threads with --mode sync (16)")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run every case N times (interleaved) and report the best of N per number (default 1)",
    )
    p.add_argument("--json", type=Path, default=RESULTS / "vs_rocketmq.json")
    p.add_argument("--png", type=Path, default=RESULTS / "vs_rocketmq.png")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--dir", help="parent of the scratch directory (default: the system temp dir)")
    p.add_argument("--keep", action="store_true", help="keep stores and logs")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    preset_name = "smoke" if args.smoke else "quick" if args.quick else "full"
    preset = dict(PRESETS[preset_name])
    if args.sizes:
        preset["sizes"] = [int(s) for s in args.sizes.split(",")]
    if args.flush:
        preset["flush"] = [f.strip().upper() for f in args.flush.split(",")]
    brokers = [b.strip() for b in args.brokers.split(",")]
    if not apache_rocketmq.have_java():
        print("vs_rocketmq needs `java` and `mvn` on PATH", file=sys.stderr)
        return 2
    build_loadgen()
    if "rocketmq" in brokers:
        apache_rocketmq.classpath()
    env = environment()
    scratch = Path(tempfile.mkdtemp(prefix="vs_rocketmq-", dir=args.dir))
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        k = 0
        for rep in range(args.repeat):
            for flush in preset["flush"]:
                for size in preset["sizes"]:
                    order = brokers if k % 2 == 0 else list(reversed(brokers))
                    k += 1
                    for broker in order:
                        work = scratch / f"{broker}-{flush}-{size}-{rep}"
                        runs.append({**run_case(broker, flush, size, preset, args, work), "repeat": rep})
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    env["loadavg_at_end"] = _read("/proc/loadavg")
    order_key = {b: i for i, b in enumerate(BROKERS)}
    runs.sort(key=lambda r: (r["flush"], r["size"], order_key[r["broker"]], r["repeat"]))
    results = best_of(runs)
    rat = ratios(results, preset["rates"])
    report = {
        "benchmark": "vs_rocketmq",
        "preset": preset_name,
        "params": {
            **preset,
            "brokers": brokers,
            "produce_mode": args.mode,
            "window": args.window if args.mode == "async" else args.threads,
            "threads": 1 if args.mode == "async" else args.threads,
            "queues": 8,
            "latency_window": 4096,
            "consumer": "DefaultMQPushConsumer, CONSUME_FROM_FIRST_OFFSET, consumeMessageBatchMaxSize 32",
            "loadgen_jvm": "-Xms1g -Xmx1g",
            "rocketmq_jvm": "-Xms512m -Xmx512m -XX:+UseG1GC (tools/apache_rocketmq.py)",
        },
        "env": env,
        "seconds": round(time.monotonic() - started, 1),
        "results": results,
        "runs": runs if args.repeat > 1 else [],
        "ratios_ferromq_over_rocketmq": rat,
        "targets": targets(rat),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(
        f"ferromq vs Apache RocketMQ {apache_rocketmq.ROCKETMQ_VERSION}: {preset_name}, "
        f"best of {args.repeat}, sends {args.mode} "
        f"(window {report['params']['window']}), 8 queues, Java client 4.9.7; * = rate not sustained"
    )
    print(table(results, preset["rates"]))
    if rat:
        print(
            "\nratios ferromq / RocketMQ (throughput: higher is better; latency, CPU per message, RSS: "
            "lower is better)"
        )
        print(ratio_table(rat, preset["rates"]))
        for t in report["targets"]:
            print(
                f"target {t['flush']} {t['size']} B: produce >= 1.0x: {t['produce_ge_1x']}; "
                f"p99 at 5k <= RocketMQ: {t['p99_at_5k_le_rocketmq']}; "
                f"broker CPU per message <= 0.5x RocketMQ's: {t['cpu_per_msg_le_half']}"
            )
    failures = [(r["broker"], r["flush"], r["size"], f) for r in results for f in r["loadgen_failures"]]
    for f in failures:
        print("FAILURE", *f)
    if not args.no_plot:
        plot(results, preset["rates"], args.png)
        print(f"wrote {args.json} and {args.png}")
    else:
        print(f"wrote {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
