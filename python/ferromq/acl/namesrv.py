"""The name server's ACL (ferromq's own: RocketMQ 4.9.7's name server checks nothing).

A name server that listens beyond loopback must have it (`ferromq namesrv` and `ferromq serve`
refuse to start otherwise). With `aclEnable=true` in the name server's configuration, the
requests that change what clients are told (REGISTER_BROKER, UNREGISTER_BROKER, the KV-config
writes, DELETE_TOPIC_IN_NAMESRV and the write permission of a broker) are taken only from an admin
account of the name server's plain_acl.yml, signed as the broker ACL wants it (or from a peer in
`globalWhiteRemoteAddresses`, or in that admin account's `whiteRemoteAddress`). Reads (routes,
cluster info, KV reads) stay open, as clients send them unsigned. `ferromq serve` also trusts the
account it made up for its own broker (a random key that never leaves the process), so its name
server needs no account of the files.
"""

from __future__ import annotations

from ferromq.acl.errors import AclError
from ferromq.acl.plain import Account, PlainAcl
from ferromq.acl.signing import ACCESS_KEY
from ferromq.protocol.codes import RequestCode
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection

NAMESRV_WRITES = frozenset(
    (
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.PUT_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
    )
)


class NamesrvGuard:
    """Raises `AclError` for a name-server write that no trusted (admin) account signed."""

    def __init__(self, acl: PlainAcl | None, broker_account: Account | None = None) -> None:
        """`acl` None: only `broker_account` is trusted (`ferromq serve` under ACL 2.0, whose
        name server has no files of its own)."""
        self.acl = acl
        self.broker_account = broker_account
        """An admin account kept outside the files (the embedded broker's)."""

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> None:
        if cmd.code not in NAMESRV_WRITES:
            return
        host = conn.peer_host
        acl = self.acl
        if acl is not None and acl.globally_white(host):
            return
        own = self.broker_account
        if own is not None and cmd.ext.get(ACCESS_KEY) == own.access_key:
            account = own
        elif acl is None:
            raise AclError(
                f"request code {cmd.code} changes the name server's routes or configuration: only the "
                "broker of this ferromq serve may send it"
            )
        else:
            account = acl.account_of(cmd)
        if not account.admin:
            raise AclError(
                f"request code {cmd.code} changes the name server's routes or configuration: it needs an "
                f"admin account of the name server's ACL, and accessKey={account.access_key} is not one"
            )
        if not account.white(host):
            PlainAcl.verify(cmd, account)
