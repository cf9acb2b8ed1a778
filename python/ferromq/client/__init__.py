"""The ferromq Python client: speaks RocketMQ 4.x to ferromq or Apache RocketMQ brokers.

asyncio first: producers, consumers and `Admin` have `async` methods and work as async context
managers; `ferromq.client.blocking` wraps them for scripts. A `ClientInstance` (one per process
and name server set, shared or private) holds connections, routes and heartbeats.
"""

from ferromq.client.admin import (
    Admin,
    BrokerInfo,
    ClusterInfo,
    ConsumerProgress,
    QueueProgress,
    TopicConfigInfo,
)
from ferromq.client.instance import ClientInstance
from ferromq.client.message import Message, MessageQueue, ReceivedMessage, SendResult, SendStatus
from ferromq.client.producer import Producer, QueueSelector, hash_selector
from ferromq.client.pull_consumer import PullConsumer
from ferromq.client.push_consumer import (
    ConcurrentListener,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    ExpressionType,
    OrderlyListener,
    PushConsumer,
    SubscriptionData,
)
from ferromq.client.rebalance import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueStrategy,
    ConsumeFromWhere,
    MessageModel,
)
from ferromq.client.route import QueueData, TopicRoute
from ferromq.client.transaction_producer import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)

__all__ = [
    "Admin",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueStrategy",
    "BrokerInfo",
    "ClientInstance",
    "ClusterInfo",
    "ConcurrentListener",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "ConsumerProgress",
    "ExpressionType",
    "LocalTransactionState",
    "Message",
    "MessageModel",
    "MessageQueue",
    "OrderlyListener",
    "Producer",
    "PullConsumer",
    "PushConsumer",
    "QueueData",
    "QueueProgress",
    "QueueSelector",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "SubscriptionData",
    "TopicConfigInfo",
    "TopicRoute",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "hash_selector",
]
