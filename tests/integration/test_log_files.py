"""Log files: `ferromq serve` writes broker.log beside its store (as Java keeps
~/logs/rocketmqlogs), or in logDir / --log-dir, besides stderr; files roll over at a size."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from ferromq.broker.config import ConfigError, load_broker_config
from ferromq.client import Message, Producer
from ferromq.logfiles import STATS_LOGGER, close_log_files, open_log_files
from ferromq.testing.waiting import wait_until

FERROMQ = Path(sys.executable).with_name("ferromq")
READY = "ferromq serving:"
TIMEOUT = 30.0


def serve(*args: str, cwd: Path) -> tuple[subprocess.Popen[str], str]:
    """Starts `ferromq serve` on free ports; returns it once ready, with its stdout so far."""
    proc = subprocess.Popen(
        [str(FERROMQ), "serve", "-p", "0", "--namesrv-port", "0", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the serving line is its first output on stdout
    assert READY in line, f"not ready: {line!r}"
    return proc, line


def stop(proc: subprocess.Popen[str]) -> str:
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    return err


def wait_for_text(path: Path, text: str) -> str:
    """The file's content, once it holds `text`."""

    def content() -> str:
        return path.read_text(encoding="utf-8") if path.exists() else ""

    def holding() -> str:
        now = content()
        return now if text in now else ""

    return str(wait_until(holding, f"{text!r} in {path}", TIMEOUT, why=content))


def test_serve_logs_beside_the_store_and_to_stderr(tmp_path: Path) -> None:
    proc, _ = serve("--store", str(tmp_path / "home" / "store"), cwd=tmp_path)
    log = tmp_path / "home" / "logs" / "ferromqlogs" / "broker.log"
    wait_for_text(log, "listening on 127.0.0.1:")
    err = stop(proc)
    assert "listening on 127.0.0.1:" in err  # stderr keeps everything too
    text = wait_for_text(log, "stopped")
    assert " INFO ferromq.broker.broker: " in text
    assert (log.parent / "stats.log").exists()


def test_log_dir_option_and_key(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"logDir={tmp_path / 'conf-logs'}\nbrokerName=b1\n")
    proc, _ = serve("-c", str(conf), "--store", str(tmp_path / "s1"), cwd=tmp_path)
    wait_for_text(tmp_path / "conf-logs" / "broker.log", "broker b1")
    stop(proc)
    proc, _ = serve("--store", str(tmp_path / "s2"), "--log-dir", str(tmp_path / "flag-logs"), cwd=tmp_path)
    wait_for_text(tmp_path / "flag-logs" / "broker.log", "listening on")
    stop(proc)
    assert not (tmp_path / "logs").exists()


def test_unwritable_log_dir_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r = subprocess.run(
        [
            str(FERROMQ),
            *("serve", "-p", "0", "--namesrv-port", "0", "--store", str(tmp_path / "s")),
            *("--log-dir", str(blocker / "logs")),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2, r.stderr
    last = r.stderr.splitlines()[-1]
    assert last.startswith(f"ferromq: cannot write log files in {blocker / 'logs'}: ")
    assert last.endswith("choose another with --log-dir / logDir") and "Traceback" not in r.stderr


def test_files_roll_over_and_stats_lines_stay_apart(tmp_path: Path) -> None:
    logger = logging.getLogger("ferromq.logtest")
    logger.setLevel(logging.INFO)
    stats = logging.getLogger(STATS_LOGGER)
    broker_log, stats_log = open_log_files(tmp_path, 1024, 2)
    try:
        for i in range(200):
            logger.info("line %03d %s", i, "x" * 40)
        stats.info("[TOPIC_PUT_NUMS] [T] Stats In One Minute, SUM: 1 TPS: 0.02 AVGPT: 0.00")
    finally:
        close_log_files()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["broker.log", "broker.log.1", "broker.log.2", "stats.log"]
    assert all((tmp_path / n).stat().st_size <= 1024 for n in names)
    assert "line 199" in broker_log.read_text()  # the newest lines are in the current file
    assert "TOPIC_PUT_NUMS" in stats_log.read_text()
    assert not any("TOPIC_PUT_NUMS" in (tmp_path / n).read_text() for n in names if n.startswith("broker"))
    assert stats.propagate  # closed: the stats logger is back to normal


def test_log_keys_are_checked() -> None:
    with pytest.raises(ConfigError, match="logMaxFiles must be > 0"):
        load_broker_config(None, log_max_files=0)
    with pytest.raises(ConfigError, match="logMaxFileSize must be >= 1024"):
        load_broker_config(None, log_max_file_size=10)
    assert load_broker_config(None, store_path_root_dir="/data/store").log_path == "/data/logs/ferromqlogs"


STATS_PERIOD_S = 2  # statsLogIntervalSeconds here: Java's broker (and ferromq's default) says 60


def stats_line_times(text: str, prefix: str) -> list[datetime]:
    """When each stats line starting with `prefix` (after its time stamp) was written."""
    return [
        datetime.strptime(ln[:23], "%Y-%m-%d %H:%M:%S,%f")
        for ln in text.splitlines()
        if ln[24:].startswith(prefix)
    ]


def test_stats_lines_every_stats_log_interval(tmp_path: Path) -> None:
    """Java's once-a-minute stats lines (the last minute's counts) go to stats.log every
    statsLogIntervalSeconds (60 unless set; a few seconds here)."""
    conf = tmp_path / "broker.conf"
    conf.write_text(f"statsLogIntervalSeconds={STATS_PERIOD_S}\n")
    proc, line = serve(
        "-c", str(conf), "--profile", "small", "--store", str(tmp_path / "store"), cwd=tmp_path
    )
    try:
        namesrv = line.split()[4].rstrip(",")

        async def produce() -> None:
            async with Producer("StatsPG", namesrv) as p:
                for i in range(3):
                    await p.send(Message("StatsTopic", f"s{i}".encode()))

        asyncio.run(asyncio.wait_for(produce(), TIMEOUT))
        stats = tmp_path / "logs" / "ferromqlogs" / "stats.log"
        prefix = "[TOPIC_PUT_NUMS] [StatsTopic] "

        def content() -> str:
            return stats.read_text() if stats.exists() else ""

        def three_lines() -> str:
            # The minute's counts are sampled every 10 s, then printed on every period.
            now = content()
            return now if len(stats_line_times(now, prefix)) >= 3 else ""

        text = str(wait_until(three_lines, "three stats lines for StatsTopic", 60.0, why=content))
        assert f"{prefix}Stats In One Minute, SUM: 3 TPS: " in text, text
        times = stats_line_times(text, prefix)
        # On the period: paced from the start, so however a line is late, lines average one a period.
        mean = (times[-1] - times[0]).total_seconds() / (len(times) - 1)
        assert STATS_PERIOD_S * 0.5 <= mean <= STATS_PERIOD_S * 2, (mean, text)
        broker_log = (tmp_path / "logs" / "ferromqlogs" / "broker.log").read_text()
        assert "TOPIC_PUT_NUMS" not in broker_log  # stats lines have their own file
    finally:
        err = stop(proc)
    assert "TOPIC_PUT_NUMS" not in err  # and stay off stderr


def test_stats_log_interval_key() -> None:
    assert load_broker_config(None).stats_log_interval_seconds == 60  # Java's once a minute
    with pytest.raises(ConfigError, match="statsLogIntervalSeconds must be > 0"):
        load_broker_config(None, stats_log_interval_seconds=0)
