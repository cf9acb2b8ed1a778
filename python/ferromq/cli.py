"""The `ferromq` command: name server, broker, both in one process, and store tools.

A startup problem the user can fix (a port in use, a store in use or unusable, a bad or missing
broker.conf) is one line on stderr, `ferromq: what is wrong; what to do`, and exit code 2; with
`-v` its traceback is logged too. Anything else keeps its traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import os
import secrets
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferromq import __version__, admin
from ferromq.acl.errors import AclError
from ferromq.acl.plain import DEFAULT_ACL_FILE, Account, PlainAcl, build_account
from ferromq.app import make_broker
from ferromq.auth import setup as auth_setup
from ferromq.auth.evaluator import AuthSettings
from ferromq.auth.setup import KNOWN_CLASSES, inner_credentials
from ferromq.broker import Broker, BrokerConfig, load_broker_config
from ferromq.broker.broker import plain_acl_of, server_limits
from ferromq.broker.config import PROFILES, ConfigError
from ferromq.errors import (
    CorruptStoreError,
    FerroMQError,
    NotAStoreError,
    StoreError,
    StoreIOError,
    StoreLockedError,
)
from ferromq.logfiles import close_log_files, open_log_files
from ferromq.namesrv import NameServer
from ferromq.netaddr import is_loopback
from ferromq.remoting.server import raise_open_file_limit
from ferromq.remoting.tls import DEFAULT_CONFIG_FILE, TlsMode, TlsSettings, read_properties_file
from ferromq.store import MessageStore

if TYPE_CHECKING:
    from ferromq.controller.server import Controller

logger = logging.getLogger("ferromq")

EXIT_USAGE = 2
REGISTER_TIMEOUT = 30
EXIT_INTERRUPTED = 130
# The gRPC port `serve` gives the RocketMQ 5.x clients (Apache RocketMQ proxy's grpcServerPort).
DEFAULT_GRPC_PORT = 8081
STORE_OPTION = "--store / storePathRootDir"
# The commands that serve connections: they raise the open file limit first.
SERVER_COMMANDS = frozenset({"serve", "namesrv", "broker", "proxy", "controller"})


class StartupError(FerroMQError):
    """How ferromq was started cannot work (a port taken, an address not on this machine); the
    message says what to change."""


def _user_error(e: BaseException) -> str | None:
    """The one line for an error the user can fix, or None for one that keeps its traceback."""
    if isinstance(e, (ConfigError, StartupError, AclError)):
        return str(e)
    if isinstance(e, StoreLockedError):
        return f"{e}; stop it, or choose another store with {STORE_OPTION}"
    if isinstance(e, StoreIOError):
        return f"{e}; choose another store with {STORE_OPTION}"
    if isinstance(e, CorruptStoreError | NotAStoreError):
        return str(e)
    return None


def _listen_error(e: OSError, what: str, host: str, port: int, option: str) -> StartupError:
    if e.errno == errno.EADDRINUSE:
        return StartupError(
            f"port {port} on {host} is in use (another {what}?); choose another with {option}"
        )
    if e.errno == errno.EACCES:
        return StartupError(f"port {port} on {host} needs privileges; choose one above 1023 with {option}")
    if e.errno == errno.EADDRNOTAVAIL or isinstance(e, socket.gaierror):
        reason = "it is not an address of this machine" if e.errno == errno.EADDRNOTAVAIL else e.strerror
        return StartupError(f"cannot listen on {host}: {reason}; choose another with --host")
    return StartupError(f"cannot listen on {host}:{port}: {e.strerror or e}; choose another with {option}")


async def _start_namesrv(ns: NameServer, host: str, port: int, option: str) -> None:
    try:
        await ns.start()
    except OSError as e:  # starting a name server only binds its port
        raise _listen_error(e, "name server", host, port, option) from e


async def _start_broker(broker: Broker, host: str) -> None:
    port = broker.config.listen_port
    try:
        await broker.start()
    except OSError as e:
        if broker.server is None and not isinstance(e, FerroMQError):  # the port did not bind
            raise _listen_error(e, "broker", host, port, "-p / listenPort") from e
        grpc, grpc_port = broker.grpc, broker.config.grpc_server_port
        if grpc is not None and grpc.port == 0 and grpc_port is not None:  # the gRPC port did not
            raise _listen_error(e, "gRPC server", host, grpc_port, "--grpc-port / grpcServerPort") from e
        raise


async def _until_signalled(ready_line: str) -> None:
    """Prints the ready line, then waits for SIGTERM or SIGINT (handled from before the line, so
    a launcher that signals as soon as it reads it gets a clean stop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(ready_line, flush=True)
    await stop.wait()
    logger.info("shutting down")


def _broker_config(args: argparse.Namespace) -> BrokerConfig:
    overrides: dict[str, Any] = {}
    if args.listen_port is not None:
        overrides["listen_port"] = args.listen_port
    if args.store:
        overrides["store_path_root_dir"] = os.path.expanduser(args.store)
    if getattr(args, "namesrv", None):
        overrides["namesrv_addr"] = args.namesrv
    if getattr(args, "log_dir", None):
        overrides["log_dir"] = args.log_dir
    profile = args.profile or ("small" if args.command == "serve" and args.config is None else "rocketmq")
    return load_broker_config(args.config, profile=profile, strict=args.strict_config, **overrides)


def _open_logs(cfg: BrokerConfig) -> None:
    """broker.log and stats.log in the configured directory, besides stderr. A logDir that cannot
    be written stops the start; the default place (beside the store) only warns, so a store
    problem is reported as itself."""
    try:
        paths = open_log_files(cfg.log_path, cfg.log_max_file_size, cfg.log_max_files)
    except OSError as e:
        reason = f"cannot write log files in {cfg.log_path}: {e.strerror or e}"
        if cfg.log_dir:
            raise StartupError(f"{reason}; choose another with --log-dir / logDir") from e
        logger.warning("%s; logging to stderr only (set --log-dir / logDir)", reason)
        return
    logger.info("logging to %s (stats lines: %s)", paths[0], paths[1])


def _namesrv_acl(config: str | None) -> PlainAcl | None:
    """The name server's ACL from its namesrv.conf: aclEnable (ferromq's: RocketMQ 4.9.7's name
    server has no ACL), rocketmqHome (else ROCKETMQ_HOME) and aclPlainFile as for a broker."""
    if config is None:
        return None
    props = read_properties_file(config)
    if props.get("aclEnable", "false").strip().lower() != "true":
        return None
    acl = PlainAcl.locate(
        props.get("rocketmqHome") or os.environ.get("ROCKETMQ_HOME"),
        props.get("aclPlainFile", DEFAULT_ACL_FILE),
    )
    acl.load()
    snapshot = acl.snapshot
    if not snapshot.global_white and not any(a.admin for a in snapshot.accounts.values()):
        # No broker could register: a name server that looks up and routes nothing.
        raise StartupError(
            f"aclEnable=true in {config} but the ACL files ({acl.default_file}) have no admin account, so "
            "no broker could register: add one (admin: true) for the brokers' namesrvAccessKey"
        )
    return acl


def _embedded_controller(args: argparse.Namespace) -> Controller | None:
    """enableControllerInNamesrv=true in namesrv.conf: a controller node served on the name
    server's port (RocketMQ 5.x's embedded mode), configured by the same file."""
    if args.config is None:
        return None
    props = read_properties_file(args.config)
    if props.get("enableControllerInNamesrv", "false").strip().lower() != "true":
        return None
    from ferromq.controller.config import load_controller_config
    from ferromq.controller.server import Controller

    return Controller(
        load_controller_config(args.config, in_namesrv=True, listen_port=args.port), args.host, serve=False
    )


def _exposed_namesrv_error(host: str, what_to_set: str) -> StartupError:
    return StartupError(
        f"the name server would listen on {host} without ACL, so anyone who reaches it could rewrite "
        f"the routes; {what_to_set}, or listen on 127.0.0.1 with --host"
    )


async def _run_namesrv(args: argparse.Namespace) -> None:
    acl = _namesrv_acl(args.config)
    if acl is None and not is_loopback(args.host):
        raise _exposed_namesrv_error(
            args.host, "set aclEnable=true in its namesrv.conf (-c), with an admin account for the brokers"
        )
    controller = _embedded_controller(args)
    # Java's name server reads TLS from system properties and tls.config.file; ferromq from the file.
    ns = NameServer(
        args.host,
        args.port,
        tls=TlsSettings.from_properties(read_properties_file(DEFAULT_CONFIG_FILE)),
        acl=acl,
        extra_handlers=controller.handlers() if controller is not None else None,
    )
    await _start_namesrv(ns, args.host, args.port, "--port")
    try:
        if controller is not None:
            await controller.start()
        await _until_signalled(
            f"ferromq name server listening on {args.host}:{ns.port}"
            + (f" (with controller {controller.config.self_id})" if controller is not None else "")
        )
    finally:
        if controller is not None:
            await controller.stop()
        await ns.stop()


def _broker_host(cfg: BrokerConfig, host: str | None) -> tuple[BrokerConfig, str]:
    """The address a broker listens on, agreeing with the one the name servers tell clients
    (brokerIP1), or a refusal that says what to set: a broker listening on 127.0.0.1 while
    clients elsewhere are told another address gets them "connection refused". No --host: listen
    on brokerIP1; a --host other than loopback with brokerIP1 left at 127.0.0.1: advertise it."""
    advertised = cfg.broker_ip1
    if host is None or host == advertised:
        return cfg, advertised
    if host in ("0.0.0.0", "::"):
        if is_loopback(advertised):
            raise StartupError(
                f"--host {host} listens on every address, but the name servers would tell clients "
                f"brokerIP1={advertised}: set brokerIP1 to the address clients reach this host at"
            )
        return cfg, host
    if is_loopback(advertised) and not is_loopback(host):
        return cfg.replace(broker_ip1=host), host
    raise StartupError(
        f"--host {host} is not brokerIP1={advertised}, the address the name servers tell clients: "
        f"listen on {advertised} (leave --host out), or set brokerIP1={host}"
    )


async def _run_broker(args: argparse.Namespace) -> None:
    cfg = _broker_config(args)
    if not cfg.namesrv_addrs:
        raise ConfigError("no name server: pass -n host:port or set namesrvAddr")
    cfg, host = _broker_host(cfg, args.host)
    _open_logs(cfg)
    broker = make_broker(cfg, host)
    await _start_broker(broker, host)
    cfg = broker.config
    try:
        await _until_signalled(
            f"ferromq broker {cfg.broker_name} listening on {host}:{broker.port}, "
            f"store {cfg.store_path_root_dir} (profile {cfg.profile}), name servers {cfg.namesrv_addr}"
        )
    finally:
        await broker.stop()


# rmq-proxy.json keys ferromq's proxy reads (Apache RocketMQ's ProxyConfig); others are logged.
PROXY_KEYS = (
    "grpcServerPort",
    "remotingListenPort",
    "rocketMQClusterName",
    "namesrvAddr",
    "proxyMode",
    *KNOWN_CLASSES,
    "authenticationEnabled",
    "authorizationEnabled",
    "authenticationWhitelist",
    "authorizationWhitelist",
    "innerClientAuthenticationCredentials",
    "userCacheRefreshSecond",
)


def _proxy_auth(pc: dict[str, Any], path: str | None, cluster: str) -> AuthSettings:
    """ACL 2.0's keys of rmq-proxy.json (true, false or their text), checked as broker.conf's."""
    values = {
        k: (str(v).strip().lower() == "true") if k.endswith("Enabled") else v
        for k, v in pc.items()
        if k in PROXY_KEYS
    }
    problems = [text for _, text in auth_setup.problems(values, plain_acl_enabled=False)]
    if problems:
        raise ConfigError(f"{path}: {'; '.join(problems)}")
    return auth_setup.settings_of(values, cluster)


def _proxy_config(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read the proxy configuration {path}: {e.strerror or e}") from e
    except ValueError as e:
        raise ConfigError(f"the proxy configuration {path} is not JSON: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"the proxy configuration {path} is not a JSON object")
    ignored = sorted(k for k in data if k not in PROXY_KEYS)
    if ignored:
        logger.info("%s: keys ferromq's proxy does not use: %s", path, ", ".join(ignored))
    return data


async def _run_proxy(args: argparse.Namespace) -> None:
    """`ferromq proxy`, Apache RocketMQ's ProxyStartup: the 5.x clients' gRPC endpoint. In local
    mode (-pm local) the broker runs inside it, from its broker.conf (-bc), as Java's does; in
    cluster mode (the default) it serves the brokers a name server lists, over remoting."""
    pc = _proxy_config(args.proxy_config)
    mode = str(args.proxy_mode or pc.get("proxyMode") or "cluster").lower()
    if mode not in ("local", "cluster"):
        raise StartupError(f"no proxy mode {mode!r}; choose -pm cluster or -pm local")
    try:
        grpc_port = int(pc.get("grpcServerPort", DEFAULT_GRPC_PORT))
    except (TypeError, ValueError):
        raise ConfigError(f"grpcServerPort in {args.proxy_config} is not a port number") from None
    namesrv = args.namesrv or pc.get("namesrvAddr")
    if mode == "cluster":
        await _run_cluster_proxy(args, pc, grpc_port, str(namesrv or ""))
        return
    overrides: dict[str, Any] = {"grpc_server_port": grpc_port}
    if namesrv:
        overrides["namesrv_addr"] = str(namesrv)
    if pc.get("rocketMQClusterName"):
        overrides["broker_cluster_name"] = str(pc["rocketMQClusterName"])
    if args.store:
        overrides["store_path_root_dir"] = os.path.expanduser(args.store)
    cfg = load_broker_config(args.broker_config, profile=args.profile or "rocketmq", **overrides)
    if _proxy_auth(pc, args.proxy_config, cfg.broker_cluster_name).enabled and not cfg.authentication_enabled:
        raise ConfigError(
            f"{args.proxy_config} turns ACL 2.0 on for gRPC, whose users are the broker's: set "
            "authenticationEnabled=true (and authorizationEnabled) in the broker's broker.conf (-bc) too"
        )
    if not cfg.namesrv_addrs:
        raise ConfigError(
            "no name server: pass -n host:port, or set namesrvAddr in rmq-proxy.json or broker.conf"
        )
    if "remotingListenPort" in pc:
        logger.info("remoting clients reach the broker inside on its listenPort %d", cfg.listen_port)
    _open_logs(cfg)
    broker = make_broker(cfg, args.host)
    await _start_broker(broker, args.host)
    cfg = broker.config
    grpc = broker.grpc
    try:
        await _until_signalled(
            f"ferromq proxy (local mode) gRPC on {args.host}:{grpc.port if grpc else '-'}, broker "
            f"{cfg.broker_name} on {args.host}:{broker.port}, store {cfg.store_path_root_dir}, "
            f"name servers {cfg.namesrv_addr}"
        )
    finally:
        await broker.stop()


async def _run_cluster_proxy(
    args: argparse.Namespace, pc: dict[str, Any], grpc_port: int, namesrv: str
) -> None:
    """`ferromq proxy -pm cluster`: the gRPC front alone, in front of the brokers the name servers
    list (`ferromq.proxy.cluster`)."""
    from ferromq.proxy.cluster import ClusterBackend  # grpcio only where gRPC is served
    from ferromq.proxy.server import GrpcServer

    if not namesrv.strip(";"):
        raise ConfigError("no name server: pass -n host:port, or set namesrvAddr in rmq-proxy.json")
    auth = _proxy_auth(pc, args.proxy_config, str(pc.get("rocketMQClusterName") or "DefaultCluster"))
    credentials = inner_credentials(pc.get("innerClientAuthenticationCredentials"))
    if not is_loopback(args.host) and not auth.authentication_enabled:
        # Reachable from the network without ACL 2.0, anyone could send and consume through it.
        raise StartupError(
            f"ferromq proxy -pm cluster would serve {args.host} without checking the clients' signatures: "
            "set authenticationEnabled=true (ACL 2.0) in rmq-proxy.json, or listen on 127.0.0.1 with --host"
        )
    if auth.enabled and credentials is None:
        raise ConfigError(
            f"{args.proxy_config}: ACL 2.0 in cluster mode reads the brokers' users with the proxy's own "
            'keys: set innerClientAuthenticationCredentials={"accessKey":"...","secretKey":"..."} (a Super '
            "user of the brokers)"
        )
    if args.broker_config or args.store:
        logger.info("-bc and --store are for local mode: ignored in cluster mode")
    if "remotingListenPort" in pc:
        logger.info("remoting clients are not served by the proxy in cluster mode: they reach the brokers")
    overrides: dict[str, Any] = {"namesrv_addr": namesrv, "grpc_server_port": grpc_port}
    if pc.get("rocketMQClusterName"):
        overrides["broker_cluster_name"] = str(pc["rocketMQClusterName"])
    # The front's settings (delay levels, invisible and renewal times, TLS): a broker's defaults.
    cfg = load_broker_config(None, profile=args.profile or "rocketmq", **overrides)
    backend = ClusterBackend(
        cfg,
        namesrv,
        credentials=credentials,
        auth=auth,
        auth_refresh_seconds=float(pc.get("userCacheRefreshSecond", 60)),
    )
    await backend.start()
    try:
        server = GrpcServer(backend, args.host, grpc_port)
        try:
            await server.start()
        except OSError as e:
            raise _listen_error(e, "gRPC server", args.host, grpc_port, "grpcServerPort in -pc") from e
        try:
            await _until_signalled(
                f"ferromq proxy (cluster mode) gRPC on {args.host}:{server.port}, name servers {namesrv}"
            )
        finally:
            await server.stop()
    finally:
        await backend.stop()


async def _run_controller(args: argparse.Namespace) -> None:
    from ferromq.controller.config import load_controller_config
    from ferromq.controller.server import Controller

    cfg = load_controller_config(args.config, listen_port=args.port)
    # Brokers reach a controller where its Raft port is: it listens there unless told otherwise.
    host = args.host if args.host is not None else cfg.self_raft_addr.rpartition(":")[0]
    if not is_loopback(host) and not cfg.authentication_enabled:
        raise StartupError(
            f"the controller would listen on {host} taking any broker's word (a forged heartbeat holds "
            "off an election): set authenticationEnabled=true and innerClientAuthenticationCredentials "
            "(the brokers' own) in its controller.conf, or listen on 127.0.0.1 with --host"
        )
    controller = Controller(cfg, host)
    await controller.start()
    try:
        await _until_signalled(f"ferromq controller {cfg.self_id} listening on {host}:{controller.port}")
    finally:
        await controller.stop()


def _serve_grpc_port(option: int | None, configured: int | None, listen_port: int) -> int | None:
    """`serve` serves the 5.x clients' gRPC: on --grpc-port, else grpcServerPort, else 8081 (any
    free port when the broker's is any free port too, as for the slave's)."""
    if option is not None:
        port = option
    elif configured is not None:
        port = configured
    else:
        port = 0 if listen_port == 0 else DEFAULT_GRPC_PORT
    return None if port < 0 else port


def _slave_config(master: BrokerConfig, port: int | None) -> BrokerConfig:
    """`serve --slave`: the master's configuration as its slave's (brokerId 1, its own store and port)."""
    if master.is_slave:
        raise ConfigError("--slave needs a master: brokerRole is SLAVE in the configuration")
    return master.replace(
        broker_role="SLAVE",
        broker_id=1,
        listen_port=master.listen_port + 10 if port is None else port,
        ha_listen_port=None,
        grpc_server_port=None,
        ha_master_address=None,
        store_path_root_dir=master.store_path_root_dir.rstrip("/\\") + "-slave",
        store_path_commit_log=None,
    )


def _embedded_broker_account() -> Account:
    """An admin account for `serve`'s own broker, made up for this process: its name server trusts
    it besides the ACL files' accounts, so the broker registers with no account configured."""
    return build_account(
        {
            "accessKey": f"ferromq-serve-{secrets.token_hex(8)}",
            "secretKey": secrets.token_urlsafe(24),
            "admin": True,
        }
    )


async def _run_serve(args: argparse.Namespace) -> None:
    cfg = _broker_config(args)
    _open_logs(cfg)
    # The broker's ACL covers its name server too (namesrvAclEnable alone also turns it on there).
    # Under ACL 2.0 (no plain_acl.yml), the name server takes writes from its own broker alone.
    ns_acl = plain_acl_of(cfg) if cfg.namesrv_acl_enable or cfg.acl_enable else None
    acl2_only = ns_acl is None and cfg.authentication_enabled
    wanted_host = args.host if args.host is not None else cfg.broker_ip1
    if ns_acl is None and not acl2_only and not is_loopback(wanted_host):
        raise _exposed_namesrv_error(
            wanted_host,
            "set authenticationEnabled=true (ACL 2.0), or aclEnable=true (or namesrvAclEnable=true), "
            "in broker.conf",
        )
    cfg, host = _broker_host(cfg, args.host)
    own: Account | None = None
    if ns_acl is not None:
        ns_acl.load()
    if (ns_acl is not None or acl2_only) and cfg.namesrv_access_key is None:
        own = _embedded_broker_account()
        cfg = cfg.replace(namesrv_access_key=own.access_key, namesrv_secret_key=own.secret_key)
    ns = NameServer(
        host,
        args.namesrv_port,
        limits=server_limits(cfg),
        tls=cfg.tls_settings(),
        acl=ns_acl,
        broker_account=own,
    )
    await _start_namesrv(ns, host, args.namesrv_port, "--namesrv-port")
    try:
        # The broker reaches its own name server over TLS when that one takes nothing else.
        enforcing = ns.server.tls.mode == TlsMode.ENFORCING
        broker_cfg = cfg.replace(
            # Its own name server, where it listens (127.0.0.1 is in every address).
            namesrv_addr=f"{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{ns.port}",
            tls_enable=cfg.tls_enable or enforcing,
            grpc_server_port=_serve_grpc_port(args.grpc_port, cfg.grpc_server_port, cfg.listen_port),
        )
        broker = make_broker(broker_cfg, host)
        await _start_broker(broker, host)
        slave: Broker | None = None
        try:
            cfg = broker.config
            # Serving means clients find the broker: its topics are routed once it registered.
            if not await ns.wait_registered(cfg.broker_addr, REGISTER_TIMEOUT):
                logger.warning("the broker did not register with the name server in %d s", REGISTER_TIMEOUT)
            served = f"broker {cfg.broker_name} on {host}:{broker.port}"
            if broker.grpc is not None:
                served += f", gRPC on {host}:{broker.grpc.port}"
            if args.slave:
                slave_port = 0 if args.slave_port is None and args.listen_port == 0 else args.slave_port
                slave = make_broker(_slave_config(cfg, slave_port), host)
                await _start_broker(slave, host)
                if not await ns.wait_registered(slave.config.broker_addr, REGISTER_TIMEOUT):
                    logger.warning(
                        "the slave did not register with the name server in %d s", REGISTER_TIMEOUT
                    )
                served += (
                    f" ({cfg.broker_role}, HA port {cfg.ha_port}), its slave on {host}:{slave.port} "
                    f"(store {slave.config.store_path_root_dir})"
                )
            await _until_signalled(
                f"ferromq serving: name server {host}:{ns.port}, {served}, "
                f"store {cfg.store_path_root_dir} (profile {cfg.profile})"
            )
        finally:
            if slave is not None:
                await slave.stop()
            await broker.stop()
    finally:
        await ns.stop()


async def _run_console(args: argparse.Namespace) -> None:
    try:
        from ferromq.console import start_console
    except ImportError as e:
        raise StartupError(
            f"ferromq console needs the console extra: pip install 'ferromq[console]' ({e})"
        ) from e
    password = os.environ.get("FERROMQ_CONSOLE_PASSWORD")
    if args.login and not password:
        raise ConfigError("--login needs the password in $FERROMQ_CONSOLE_PASSWORD")
    if bool(args.access_key) != bool(args.secret_key):
        raise ConfigError("--access-key and $FERROMQ_SECRET_KEY go together")
    settings: dict[str, Any] = {
        "login": (args.login, password) if args.login else None,
        "access_key": args.access_key,
        "secret_key": args.secret_key,
    }
    try:
        runner, url = await start_console(args.namesrv, args.host, args.port, **settings)
    except OSError as e:
        raise _listen_error(e, "console", args.host, args.port, "--port") from e
    try:
        await _until_signalled(f"ferromq console on {url} (name server {args.namesrv}, read-only)")
    finally:
        await runner.cleanup()


def _store_info(args: argparse.Namespace) -> int:
    try:
        store = MessageStore.open_read_only(args.path)
    except StoreError as e:
        print(f"ferromq: {e}", file=sys.stderr)
        return EXIT_USAGE
    with store:
        print(f"store {args.path}")
        print(f"  commitlog  min={store.min_physical_offset}  max={store.max_physical_offset}")
        queues = store.queues()
        print(f"  {len(queues)} consume queues")
        for topic, queue_id, lo, hi in queues:
            print(f"    {topic:<40} {queue_id:>4}  min={lo:<10} max={hi}")
    return 0


def _add_broker_args(p: argparse.ArgumentParser, default_profile: str) -> None:
    p.add_argument("-c", "--config", help="broker.conf (Java properties with RocketMQ's keys)")
    p.add_argument("-p", "--listen-port", type=int, help="overrides listenPort (0: any free port)")
    p.add_argument("--store", help="overrides storePathRootDir")
    p.add_argument(
        "--log-dir", help="overrides logDir (default: logs/ferromqlogs beside the store directory)"
    )
    p.add_argument(
        "--host",
        help="address to listen on (default: brokerIP1, 127.0.0.1 unless broker.conf sets it; another "
        "address than brokerIP1 is refused, as clients would be told one and find nothing there)",
    )
    p.add_argument(
        "--profile",
        choices=list(PROFILES),
        help="store file sizes under broker.conf's values: small (64 MiB CommitLog files) or "
        f"rocketmq (RocketMQ's defaults, 1 GiB); default: {default_profile}",
    )
    p.add_argument(
        "--strict-config", action="store_true", help="broker.conf keys that are not RocketMQ's are errors"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ferromq", description="An Apache RocketMQ (4.x and 5.x) compatible broker."
    )
    parser.add_argument("--version", action="version", version=f"ferromq {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="a name server and a broker in one process")
    _add_broker_args(p, "small without -c, rocketmq with -c")
    p.add_argument("--namesrv-port", type=int, default=9876)
    p.add_argument(
        "--grpc-port",
        type=int,
        help="the RocketMQ 5.x clients' gRPC port (default: grpcServerPort of -c, else "
        f"{DEFAULT_GRPC_PORT}; 0: any free port; -1: none)",
    )
    p.add_argument(
        "--slave",
        action="store_true",
        help="also a slave of the broker (brokerId 1, store '<store>-slave', HA replication)",
    )
    p.add_argument(
        "--slave-port", type=int, help="the slave's listenPort (default: the broker's + 10; 0: any)"
    )
    p.set_defaults(run=_run_serve)

    p = sub.add_parser("namesrv", help="a name server")
    p.add_argument("--port", type=int, default=9876)
    p.add_argument(
        "-c", "--config", help="namesrv.conf (aclEnable, rocketmqHome, aclPlainFile: the name server's ACL)"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.set_defaults(run=_run_namesrv)

    p = sub.add_parser("broker", help="a broker registering with name servers")
    _add_broker_args(p, "rocketmq")
    p.add_argument("-n", "--namesrv", help="name server addresses, host:port;host:port")
    p.set_defaults(run=_run_broker)

    p = sub.add_parser(
        "proxy", help="the RocketMQ 5.x clients' gRPC endpoint, as Apache RocketMQ's ProxyStartup"
    )
    p.add_argument(
        "-pm",
        "--proxy-mode",
        help="cluster (in front of the brokers the name server lists; the default) or local (the "
        "broker inside, from -bc)",
    )
    p.add_argument("-bc", "--broker-config", help="broker.conf of the broker inside (local mode)")
    p.add_argument(
        "-pc", "--proxy-config", help="rmq-proxy.json (grpcServerPort, namesrvAddr, rocketMQClusterName)"
    )
    p.add_argument("-n", "--namesrv", help="name server addresses, host:port;host:port")
    p.add_argument("--store", help="overrides the broker's storePathRootDir")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--profile", choices=list(PROFILES), help="store file sizes under broker.conf's (rocketmq)"
    )
    p.set_defaults(run=_run_proxy)

    p = sub.add_parser("controller", help="a controller node (automatic failover of broker groups)")
    p.add_argument("-c", "--config", required=True, help="controller.conf (controllerDLegerPeers, ...)")
    p.add_argument(
        "--host",
        help="address to listen on (default: the host of its own Raft address in controllerDLegerPeers)",
    )
    p.add_argument("--port", type=int, help="listenPort (overrides the file; 0: any free port)")
    p.set_defaults(run=_run_controller)

    admin.add_parser(sub)

    p = sub.add_parser("console", help="a read-only web console: cluster, topics, groups, messages")
    p.add_argument(
        "-n",
        "--namesrv",
        default=os.environ.get("NAMESRV_ADDR", admin.DEFAULT_NAMESRV),
        help=f"name server address (default $NAMESRV_ADDR or {admin.DEFAULT_NAMESRV})",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0: any free port)")
    p.add_argument(
        "--login",
        help="the access page's user (its password: $FERROMQ_CONSOLE_PASSWORD); without it no access page",
    )
    p.add_argument(
        "--access-key",
        default=os.environ.get("FERROMQ_ACCESS_KEY"),
        help="sign requests to brokers with an ACL (default $FERROMQ_ACCESS_KEY; its secret: "
        "$FERROMQ_SECRET_KEY)",
    )
    p.set_defaults(run=_run_console, secret_key=os.environ.get("FERROMQ_SECRET_KEY"))

    p = sub.add_parser("store-info", help="list the consume queues of a store directory (read-only)")
    p.add_argument("path")
    p.set_defaults(func=_store_info)

    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if hasattr(args, "func"):
            return int(args.func(args))
        if args.command in SERVER_COMMANDS:
            raise_open_file_limit()
        try:
            asyncio.run(args.run(args))
        finally:
            close_log_files()
    except KeyboardInterrupt:  # before the signal handlers were installed, or in store-info
        return EXIT_INTERRUPTED
    except Exception as e:
        message = _user_error(e)
        if message is None:
            raise
        logger.debug("%s failed", args.command, exc_info=e)
        print(f"ferromq: {message}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
