"""Which brokers a command goes to: one by address, or every broker (master) the name server lists."""

from __future__ import annotations

from ferromq.client import Admin
from ferromq.errors import BrokerError
from ferromq.protocol.codes import ResponseCode


async def broker_addrs(admin: Admin, broker_addr: str | None) -> list[str]:
    if broker_addr:
        return [broker_addr]
    info = await admin.cluster_info()
    return [a for b in sorted(info.brokers) for _, a in sorted(info.brokers[b].addrs.items())]


async def master_addrs(admin: Admin, broker_names: list[str] | None) -> dict[str, str]:
    """Broker name -> master address, of every broker or of `broker_names` (each must have one)."""
    masters = (await admin.cluster_info()).master_addrs()
    if broker_names is None:
        return masters
    missing = [n for n in broker_names if n not in masters]
    if missing:
        raise BrokerError(f"no master for broker(s) {', '.join(missing)}", ResponseCode.SERVICE_NOT_AVAILABLE)
    return {n: masters[n] for n in broker_names}
