"""The check every remoting request goes through on a broker with ACL 2.0 on, before its handler
runs (Java 5.3.3: the broker's authentication then authorization pipelines). A refusal is
NO_PERMISSION with Java's text."""

from __future__ import annotations

from ferromq.auth.contexts import remoting_needs
from ferromq.auth.evaluator import Auth
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection


class AuthGuard:
    def __init__(self, auth: Auth) -> None:
        self.auth = auth

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> None:
        auth = self.auth
        username = auth.remoting_user(cmd)
        if auth.settings.authorization_enabled:
            needed = remoting_needs(cmd, auth.settings.cluster)
            auth.authorize(username, needed, conn.peer_host, str(cmd.code))
