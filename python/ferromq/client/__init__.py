"""The ferromq Python client: speaks RocketMQ 4.x to ferromq or Apache RocketMQ brokers.

asyncio first: `Producer`, consumers and `Admin` have `async` methods and work as async context
managers. A shared `ClientInstance` (one per process and name server set) holds connections,
routes and heartbeats.
"""

from ferromq.client.instance import ClientInstance
from ferromq.client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from ferromq.client.producer import Producer, QueueSelector, hash_selector

__all__ = [
    "ClientInstance",
    "Message",
    "MessageQueue",
    "Producer",
    "QueueSelector",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "hash_selector",
]
