"""`ferromq admin user ...` and `ferromq admin acl ...`: ACL 2.0 users and access rules."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from ferromq.admin.output import make_table
from ferromq.client import Admin
from ferromq.errors import QueryNotFoundError


async def user_create(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.create_user(
        args.username, args.password, args.type, broker_addr=args.broker_addr, cluster=args.cluster
    )
    args.out.result(
        {"created": args.username, "brokers": addrs}, f"created user {args.username} on {', '.join(addrs)}"
    )


async def user_update(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.update_user(
        args.username,
        args.password,
        args.type,
        args.status,
        broker_addr=args.broker_addr,
        cluster=args.cluster,
    )
    args.out.result(
        {"updated": args.username, "brokers": addrs}, f"updated user {args.username} on {', '.join(addrs)}"
    )


async def user_delete(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.delete_user(args.username, broker_addr=args.broker_addr, cluster=args.cluster)
    args.out.result(
        {"deleted": args.username, "brokers": addrs}, f"deleted user {args.username} on {', '.join(addrs)}"
    )


def _users_table(users: list[dict[str, Any]]) -> Table:
    t = make_table("username", "type", "status")
    for u in users:
        t.add_row(str(u.get("username", "")), str(u.get("userType", "")), str(u.get("userStatus", "")))
    return t


async def user_get(admin: Admin, args: argparse.Namespace) -> None:
    user = await admin.get_user(args.username, broker_addr=args.broker_addr)
    if user is None:
        raise QueryNotFoundError(f"no user {args.username}")
    args.out.result(user, _users_table([user]))


async def user_list(admin: Admin, args: argparse.Namespace) -> None:
    users = await admin.list_users(args.filter, broker_addr=args.broker_addr)
    args.out.result(users, _users_table(users))


def _split_list(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


async def _acl_put(admin: Admin, args: argparse.Namespace, update: bool) -> None:
    addrs = await admin.put_acl(
        args.subject,
        _split_list(args.resources),
        _split_list(args.actions),
        args.decision,
        _split_list(args.source_ips),
        update=update,
        broker_addr=args.broker_addr,
        cluster=args.cluster,
    )
    args.out.result(
        {"subject": args.subject, "brokers": addrs}, f"ACL of {args.subject} set on {', '.join(addrs)}"
    )


async def acl_create(admin: Admin, args: argparse.Namespace) -> None:
    await _acl_put(admin, args, update=False)


async def acl_update(admin: Admin, args: argparse.Namespace) -> None:
    await _acl_put(admin, args, update=True)


async def acl_delete(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.delete_acl(
        args.subject, args.resource, args.policy_type, broker_addr=args.broker_addr, cluster=args.cluster
    )
    args.out.result(
        {"subject": args.subject, "brokers": addrs}, f"ACL of {args.subject} deleted on {', '.join(addrs)}"
    )


def _acls_table(acls: list[dict[str, Any]]) -> Table:
    t = make_table("subject", "policy", "resource", "actions", "source IPs", "decision")
    for acl in acls:
        for policy in acl.get("policies") or []:
            for e in policy.get("entries") or []:
                t.add_row(
                    str(acl.get("subject", "")),
                    str(policy.get("policyType", "")),
                    str(e.get("resource", "")),
                    ",".join(e.get("actions") or []),
                    ",".join(e.get("sourceIps") or []),
                    str(e.get("decision", "")),
                )
    return t


async def acl_get(admin: Admin, args: argparse.Namespace) -> None:
    acl = await admin.get_acl(args.subject, broker_addr=args.broker_addr)
    if acl is None:
        raise QueryNotFoundError(f"no ACL for {args.subject}")
    args.out.result(acl, _acls_table([acl]))


async def acl_list(admin: Admin, args: argparse.Namespace) -> None:
    acls = await admin.list_acls(args.subject_filter, args.resource_filter, broker_addr=args.broker_addr)
    args.out.result(acls, _acls_table(acls))
