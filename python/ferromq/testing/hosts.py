"""Hosts for cluster tests on one machine: Linux network namespaces joined by a bridge of their own.

Each host is a namespace with `lo` and one end of a veth pair holding an address of a private
/24 (10.213.R.0/24, R drawn per run); the other end is enslaved to the run's bridge in a namespace
of its own (the switch), which has no address and no route out: nothing is routed out, and no
interface ever appears in (or vanishes from) the root namespace, where a JVM listing the interfaces
as one goes away fails ("getFlags() failed"). Servers started in a
host bind its address as they would on a machine of their own. Faults: kill -9, SIGSTOP/SIGCONT,
and a whole host cut off the bridge (its link down) and healed; one link or one direction of it
cut with nftables (`cut`/`uncut`; a one-way cut stops TCP both ways, its replies being lost).
Needs root (`available()` says whether this machine can; a test skips clearly otherwise).
Everything is removed on `close()`, also when the test fails (and at interpreter exit); only the
processes started here are ever signalled. `small_disk` gives a directory a tmpfs of its own, a
disk `fill` can fill to the last block (unmounted on `close()`).

    with Hosts(3, tmp_path) as hosts:
        proc = hosts.spawn(0, "namesrv", ["ferromq", "namesrv", "--host", hosts.addr(0)])
        hosts.partition(1); ...; hosts.heal(1)
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import signal
import subprocess
import uuid
from pathlib import Path
from types import TracebackType

TIMEOUT = 30.0


def available() -> str | None:
    """Why hosts cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2 (`ip`)"
    return None


def cuts_available() -> str | None:
    """Why one-link and asymmetric cuts (`Hosts.cut`) cannot be made here, or None."""
    if (why := available()) is not None:
        return why
    if shutil.which("nft") is None:
        return "one-link cuts need nftables (`apt-get install -y nftables`)"
    return None


def _ip_argv(args: tuple[str, ...], ns: str | None) -> list[str]:
    return ["ip", "-n", ns, *args] if ns else ["ip", *args]


def _ip(*args: str, ns: str | None = None) -> None:
    argv = _ip_argv(args, ns)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {done.stderr.strip()}")


def _ip_quiet(*args: str, ns: str | None = None) -> None:
    """`ip` for teardown: what is already gone is no error."""
    subprocess.run(_ip_argv(args, ns), capture_output=True, timeout=TIMEOUT)


class Hosts:
    def __init__(self, count: int, workdir: Path) -> None:
        self.count = count
        self.workdir = workdir
        run = uuid.uuid4().hex[:4]
        self._prefix = f"fmq{run}"  # interface names stay within 15 characters
        self._subnet = random.randint(1, 254)
        self.names = [f"{self._prefix}h{i}" for i in range(count)]
        self._bridge = f"{self._prefix}br"
        self._switch = f"{self._prefix}sw"  # the namespace of the bridge and the links' outer ends
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._made: list[str] = []
        self._mounts: list[Path] = []

    # -- layout ------------------------------------------------------------------------------

    def __enter__(self) -> Hosts:
        # Also removed when the interpreter exits without reaching __exit__ (an interrupted run).
        atexit.register(self.close)
        try:
            _ip("netns", "add", self._switch)
            self._made.append(self._switch)
            _ip("link", "add", self._bridge, "type", "bridge", ns=self._switch)
            _ip("link", "set", self._bridge, "up", ns=self._switch)
            for i, ns in enumerate(self.names):
                _ip("netns", "add", ns)
                self._made.append(ns)
                outside, inside = self._link(i), f"{self._prefix}v{i}b"
                # Each end made in its namespace: the pair never passes through the root one.
                peer = ("peer", inside, "netns", ns)
                _ip("link", "add", outside, "netns", self._switch, "type", "veth", *peer)
                _ip("link", "set", outside, "master", self._bridge, ns=self._switch)
                _ip("link", "set", outside, "up", ns=self._switch)
                _ip("link", "set", "lo", "up", ns=ns)
                _ip("addr", "add", f"{self.addr(i)}/24", "dev", inside, ns=ns)
                _ip("link", "set", inside, "up", ns=ns)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _link(self, i: int) -> str:
        return f"{self._prefix}v{i}a"

    def addr(self, i: int) -> str:
        return f"10.213.{self._subnet}.{i + 1}"

    # -- processes ---------------------------------------------------------------------------

    def argv(self, i: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.names[i], *argv]

    def spawn(
        self, i: int, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """`argv` in host `i` (its PID is the program's: `ip netns exec` execs it), output to
        `<workdir>/<name>.log`."""
        with open(self.workdir / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(
                self.argv(i, argv),
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                env=None if env is None else {**os.environ, **env},
            )
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def run(
        self, i: int, argv: list[str], timeout: float = 120.0, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(i, argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.workdir,
            env=None if env is None else {**os.environ, **env},
        )

    # -- faults ------------------------------------------------------------------------------

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(TIMEOUT)

    def pause(self, name: str) -> None:
        os.kill(self.procs[name].pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.kill(self.procs[name].pid, signal.SIGCONT)

    def partition(self, i: int) -> None:
        """Host `i` cut off from every other (its link to the bridge down): its processes run on
        and see their connections time out, as a host behind a failed switch port would."""
        _ip("link", "set", self._link(i), "down", ns=self._switch)

    def heal(self, i: int) -> None:
        _ip("link", "set", self._link(i), "up", ns=self._switch)

    def cut(self, i: int, j: int, both_ways: bool = True) -> None:
        """Packets from host `i` to host `j` dropped (and from `j` to `i` unless `both_ways` is
        False: an asymmetric partition), by an nftables rule in `i`'s (and `j`'s) namespace; the
        other links stay up. Needs `nft` and nf_tables (`cuts_available()`); `uncut` undoes it."""
        self._drop(i, j)
        if both_ways:
            self._drop(j, i)

    def uncut(self, i: int, j: int) -> None:
        for a, b in ((i, j), (j, i)):
            subprocess.run(
                self.argv(a, ["nft", "delete", "table", "inet", f"ferromq_cut{b}"]),
                capture_output=True,
                timeout=TIMEOUT,
            )

    def _drop(self, i: int, j: int) -> None:
        table = f"ferromq_cut{j}"
        for rule in (
            ["add", "table", "inet", table],
            ["add", "chain", "inet", table, "out", "{ type filter hook output priority 0; }"],
            ["add", "rule", "inet", table, "out", "ip", "daddr", self.addr(j), "drop"],
        ):
            done = subprocess.run(
                self.argv(i, ["nft", *rule]), capture_output=True, text=True, timeout=TIMEOUT
            )
            if done.returncode != 0:
                raise OSError(f"nft {' '.join(rule)} in {self.names[i]}: {done.stderr.strip()}")

    def small_disk(self, path: Path, megabytes: int) -> Path:
        """`path` made a file system of its own (tmpfs) of `megabytes`: a disk that can fill up.
        Mount it before starting the process that uses it (a host sees the mounts made before
        its process started)."""
        path.mkdir(parents=True, exist_ok=True)
        argv = ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(path)]
        subprocess.run(argv, check=True, capture_output=True, timeout=TIMEOUT)
        self._mounts.append(path)
        return path

    @staticmethod
    def fill(path: Path) -> Path:
        """Fills the file system holding `path` to its last block with one file, and returns
        that file (removing it gives the space back)."""
        filler = path / "ferromq-disk-filler"
        with open(filler, "wb") as f:
            size = 0
            for chunk in (1 << 20, 1 << 12):  # whole MiBs while they fit, then pages
                while True:
                    try:
                        os.posix_fallocate(f.fileno(), size, chunk)
                    except OSError:
                        break
                    size += chunk
        return filler

    # -- teardown ----------------------------------------------------------------------------

    def close(self) -> None:
        atexit.unregister(self.close)
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(TIMEOUT)
        for mount in reversed(self._mounts):
            subprocess.run(["umount", "--lazy", str(mount)], capture_output=True, timeout=TIMEOUT)
        self._mounts.clear()
        for made in reversed(self._made):
            if made != self._switch:
                # The pair goes with its outer end at once (a namespace may outlive its deletion
                # while the kernel still holds a reference to it).
                i = self.names.index(made)
                _ip_quiet("link", "del", self._link(i), ns=self._switch)
            # The switch's deletion takes the bridge with it.
            _ip_quiet("netns", "del", made)
        self._made.clear()
