"""What a request touches under ACL 2.0: the resources it names and the actions it needs on each,
as Java 5.3.3's `DefaultAuthorizationContextBuilder` reads them (its explicit cases, then the
`@RocketMQAction` / `@RocketMQResource` annotations of the request headers, written out below as
a table). A request that names nothing (no ext fields, or a code without an annotated header)
needs only its signature.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ferromq.auth.errors import AuthorizationError
from ferromq.auth.model import Action, Resource, ResourcePattern, ResourceType
from ferromq.jsonutil import loads_lenient
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import RETRY_PREFIX

Needed = list[tuple[Resource, tuple[Action, ...]]]

A = Action
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER

# code -> (resource when no field names one, actions, fields naming resources (type, field,
# splitter)). Java's `@RocketMQAction(value, resource, action)` and `@RocketMQResource` per header.
_Fields = tuple[tuple[ResourceType, str, str], ...]
_ANNOTATED: dict[int, tuple[ResourceType | None, tuple[Action, ...], _Fields]] = {
    RC.ACK_MESSAGE: (None, (A.SUB,), ((G, "consumerGroup", ""), (T, "topic", ""))),
    RC.ADD_BROKER: (C, (A.UPDATE,), ()),
    RC.ADD_WRITE_PERM_OF_BROKER: (C, (A.UPDATE,), ()),
    RC.AUTH_CREATE_ACL: (C, (A.UPDATE,), ()),
    RC.AUTH_CREATE_USER: (C, (A.UPDATE,), ()),
    RC.AUTH_DELETE_ACL: (C, (A.UPDATE,), ()),
    RC.AUTH_DELETE_USER: (C, (A.UPDATE,), ()),
    RC.AUTH_GET_ACL: (C, (A.GET,), ()),
    RC.AUTH_GET_USER: (C, (A.GET,), ()),
    RC.AUTH_LIST_ACL: (C, (A.GET,), ()),
    RC.AUTH_LIST_USER: (C, (A.GET,), ()),
    RC.AUTH_UPDATE_ACL: (C, (A.UPDATE,), ()),
    RC.AUTH_UPDATE_USER: (C, (A.UPDATE,), ()),
    RC.BROKER_HEARTBEAT: (C, (A.UPDATE,), ((C, "clusterName", ""),)),
    RC.CHANGE_MESSAGE_INVISIBLETIME: (None, (A.SUB,), ((G, "consumerGroup", ""), (T, "topic", ""))),
    RC.CHECK_ROCKSDB_CQ_WRITE_PROGRESS: (None, (A.GET,), ((T, "topic", ""),)),
    RC.CHECK_TRANSACTION_STATE: (None, (A.PUB,), ((T, "topic", ""),)),
    RC.CLEAN_BROKER_DATA: (C, (A.UPDATE,), ((C, "clusterName", ""),)),
    RC.CLONE_GROUP_OFFSET: (None, (A.UPDATE,), ((G, "destGroup", ""), (T, "topic", ""))),
    RC.CONSUME_MESSAGE_DIRECTLY: (None, (A.SUB,), ((G, "consumerGroup", ""), (T, "topic", ""))),
    RC.CONTROLLER_ALTER_SYNC_STATE_SET: (C, (A.UPDATE,), ()),
    RC.CONTROLLER_APPLY_BROKER_ID: (C, (A.UPDATE,), ((C, "clusterName", ""),)),
    RC.CONTROLLER_ELECT_MASTER: (C, (A.UPDATE,), ((C, "clusterName", ""),)),
    RC.CONTROLLER_GET_NEXT_BROKER_ID: (C, (A.GET,), ((C, "clusterName", ""),)),
    RC.CONTROLLER_GET_REPLICA_INFO: (C, (A.GET,), ()),
    RC.CONTROLLER_REGISTER_BROKER: (C, (A.UPDATE,), ((C, "clusterName", ""),)),
    RC.DELETE_KV_CONFIG: (C, (A.UPDATE,), ()),
    RC.DELETE_SUBSCRIPTIONGROUP: (None, (A.DELETE,), ((G, "groupName", ""),)),
    RC.DELETE_TOPIC_IN_BROKER: (None, (A.DELETE,), ((T, "topic", ""),)),
    RC.DELETE_TOPIC_IN_NAMESRV: (C, (A.UPDATE,), ((C, "clusterName", ""),)),
    RC.EXCHANGE_BROKER_HA_INFO: (C, (A.UPDATE,), ()),
    RC.EXPORT_ROCKSDB_CONFIG_TO_JSON: (C, (A.GET,), ()),
    RC.GET_ALL_PRODUCER_INFO: (C, (A.GET,), ()),
    RC.GET_ALL_TOPIC_CONFIG: (T, (A.LIST,), ()),
    RC.GET_BROKER_CONSUME_STATS: (C, (A.GET,), ()),
    RC.GET_BROKER_MEMBER_GROUP: (None, (A.GET,), ((C, "clusterName", ""),)),
    RC.GET_CONSUMER_CONNECTION_LIST: (None, (A.GET,), ((G, "consumerGroup", ""),)),
    RC.GET_CONSUMER_RUNNING_INFO: (None, (A.GET,), ((G, "consumerGroup", ""),)),
    RC.GET_CONSUME_STATS: (
        None,
        (A.GET,),
        ((G, "consumerGroup", ""), (T, "topic", ""), (T, "topicList", ";")),
    ),
    RC.GET_EARLIEST_MSG_STORETIME: (None, (A.GET,), ((T, "topic", ""),)),
    RC.GET_KVLIST_BY_NAMESPACE: (C, (A.GET,), ()),
    RC.GET_KV_CONFIG: (C, (A.GET,), ()),
    RC.GET_MAX_OFFSET: (None, (A.GET,), ((T, "topic", ""),)),
    RC.GET_MIN_OFFSET: (None, (A.GET,), ((T, "topic", ""),)),
    RC.GET_PRODUCER_CONNECTION_LIST: (C, (A.GET,), ()),
    RC.GET_SUBSCRIPTIONGROUP_CONFIG: (None, (A.GET,), ((G, "group", ""),)),
    RC.GET_TOPICS_BY_CLUSTER: (T, (A.LIST,), ()),
    RC.GET_TOPIC_CONFIG: (None, (A.GET,), ((T, "topic", ""),)),
    RC.GET_PARENT_TOPIC_INFO: (None, (A.GET,), ((T, "topic", ""),)),
    RC.GET_LITE_TOPIC_INFO: (None, (A.GET,), ((T, "parentTopic", ""),)),
    # RocketMQ 5.5's lite requests. 5.5.0 annotates none of their headers with an action, so its ACL asks
    # only for a signature; ferromq asks what the 4.x/5.x request each resembles asks (a lite pop as a
    # pop, a lite view as a group's or topic's), so ACL 2.0 does not open consumption to any signed user.
    RC.POP_LITE_MESSAGE: (None, (A.SUB,), ((G, "consumerGroup", ""), (T, "topic", ""))),
    RC.GET_LITE_CLIENT_INFO: (None, (A.GET,), ((G, "group", ""), (T, "parentTopic", ""))),
    RC.GET_LITE_GROUP_INFO: (None, (A.GET,), ((G, "group", ""),)),
    RC.TRIGGER_LITE_DISPATCH: (None, (A.UPDATE,), ((G, "group", ""),)),
    RC.GET_BROKER_LITE_INFO: (C, (A.GET,), ()),
    RC.SWITCH_TIMER_ENGINE: (C, (A.UPDATE,), ()),
    RC.GET_TOPIC_STATS_INFO: (None, (A.GET,), ((T, "topic", ""),)),
    RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: (None, (A.GET,), ((T, "topic", ""), (G, "group", ""))),
    RC.INVOKE_BROKER_TO_RESET_OFFSET: (None, (A.UPDATE,), ((G, "group", ""), (T, "topic", ""))),
    RC.NOTIFICATION: (None, (A.SUB,), ((G, "consumerGroup", ""), (T, "topic", ""))),
    RC.NOTIFY_BROKER_ROLE_CHANGED: (C, (A.UPDATE,), ()),
    RC.NOTIFY_CONSUMER_IDS_CHANGED: (None, (A.SUB,), ((G, "consumerGroup", ""),)),
    RC.NOTIFY_MIN_BROKER_ID_CHANGE: (C, (A.UPDATE,), ()),
    RC.PEEK_MESSAGE: (None, (A.SUB,), ((T, "topic", ""), (G, "consumerGroup", ""))),
    RC.POLLING_INFO: (None, (A.GET,), ((G, "consumerGroup", ""), (T, "topic", ""))),
    RC.POP_MESSAGE: (None, (A.SUB,), ((G, "consumerGroup", ""), (T, "topic", ""))),
    RC.PUSH_REPLY_MESSAGE_TO_CLIENT: (None, (A.SUB,), ((G, "producerGroup", ""), (T, "topic", ""))),
    RC.PUT_KV_CONFIG: (C, (A.UPDATE,), ()),
    RC.QUERY_CONSUME_QUEUE: (None, (A.GET,), ((T, "topic", ""), (G, "consumerGroup", ""))),
    RC.QUERY_CONSUME_TIME_SPAN: (None, (A.GET,), ((T, "topic", ""), (G, "group", ""))),
    RC.QUERY_CORRECTION_OFFSET: (
        None,
        (A.GET,),
        ((G, "filterGroups", ","), (G, "compareGroup", ""), (T, "topic", "")),
    ),
    RC.QUERY_DATA_VERSION: (C, (A.GET,), ((C, "clusterName", ""),)),
    RC.QUERY_SUBSCRIPTION_BY_CONSUMER: (None, (A.GET,), ((G, "group", ""), (T, "topic", ""))),
    RC.QUERY_TOPICS_BY_CONSUMER: (None, (A.GET,), ((G, "group", ""),)),
    RC.QUERY_TOPIC_CONSUME_BY_WHO: (None, (A.GET,), ((T, "topic", ""),)),
    RC.REGISTER_BROKER: (C, (A.UPDATE,), ((C, "clusterName", ""),)),
    RC.REGISTER_TOPIC_IN_NAMESRV: (C, (A.UPDATE,), ()),
    RC.REMOVE_BROKER: (C, (A.UPDATE,), ((C, "brokerClusterName", ""),)),
    RC.RESET_MASTER_FLUSH_OFFSET: (C, (A.UPDATE,), ()),
    RC.RESUME_CHECK_HALF_MESSAGE: (None, (A.UPDATE,), ((T, "topic", ""),)),
    RC.SEARCH_OFFSET_BY_TIMESTAMP: (None, (A.GET,), ((T, "topic", ""),)),
    RC.UNREGISTER_BROKER: (C, (A.UPDATE,), ((C, "clusterName", ""),)),
    RC.UPDATE_AND_CREATE_TOPIC: (None, (A.CREATE,), ((T, "topic", ""),)),
    RC.UPDATE_AND_CREATE_TOPIC_LIST: (None, (A.CREATE,), ()),
    RC.UPDATE_AND_GET_GROUP_FORBIDDEN: (None, (A.UPDATE,), ((G, "group", ""), (T, "topic", ""))),
    RC.VIEW_BROKER_STATS_DATA: (C, (A.GET,), ()),
    RC.VIEW_MESSAGE_BY_ID: (None, (A.GET,), ((T, "topic", ""),)),
    RC.WIPE_WRITE_PERM_OF_BROKER: (C, (A.UPDATE,), ()),
}

_SUB_GET = (A.SUB, A.GET)


def _is_retry(name: str | None) -> bool:
    return name is not None and name.startswith(RETRY_PREFIX)


def _sub_on_group_and_queues(out: Needed, body: bytes) -> None:
    """LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: SUB on the body's group and on each queue's topic."""
    data: Any = loads_lenient(body)
    out.append((Resource.group(str(data.get("consumerGroup"))), (A.SUB,)))
    for mq in data.get("mqSet") or []:
        topic = mq.get("topic")
        if topic is not None and not _is_retry(topic):
            out.append((Resource.topic(str(topic)), (A.SUB,)))


def _heartbeat(out: Needed, body: bytes) -> None:
    data: Any = loads_lenient(body)
    for consumer in data.get("consumerDataSet") or []:
        out.append((Resource.group(str(consumer.get("groupName"))), (A.SUB,)))
        for sub in consumer.get("subscriptionDataSet") or []:
            topic = sub.get("topic")
            if topic is not None and not _is_retry(topic):
                out.append((Resource.topic(str(topic)), (A.SUB,)))


def _lite_subscriptions(out: Needed, body: bytes) -> None:
    """LITE_SUBSCRIPTION_CTL: SUB on each subscription's group and topic (5.5.0 asks for a signature only;
    ferromq asks what a consumer's heartbeat asks)."""
    data: Any = loads_lenient(body) if body else {}
    for entry in data.get("subscriptionSet") or []:
        out.append((Resource.group(str(entry.get("group") or "")), (A.SUB,)))
        out.append((Resource.topic(str(entry.get("topic") or "")), (A.SUB,)))


def _send(out: Needed, topic: str | None, group: str | None) -> None:
    if _is_retry(topic):
        out.append((Resource.group(group if group and group.strip() else topic or ""), (A.SUB,)))
    else:
        out.append((Resource.topic(topic or ""), (A.PUB,)))


def _topic_and_group(out: Needed, ext: Mapping[str, str], actions: tuple[Action, ...]) -> None:
    topic = ext.get("topic")
    if not _is_retry(topic):
        out.append((Resource.topic(topic or ""), actions))
    out.append((Resource.group(ext.get("consumerGroup") or ""), actions))


def remoting_needs(cmd: RemotingCommand, cluster: str) -> Needed:
    """The resources `cmd` touches and the actions it needs on each (`AuthorizationError` for a
    body Java could not parse)."""
    ext = cmd.ext
    out: Needed = []
    code = cmd.code
    if code == RC.LITE_SUBSCRIPTION_CTL:  # its names are in its body (no header field)
        try:
            _lite_subscriptions(out, cmd.body)
        except (ValueError, AttributeError, TypeError):
            raise AuthorizationError("parse authorization context error.") from None
        return out
    if not ext:
        return out
    try:
        if code == RC.GET_ROUTEINFO_BY_TOPIC:
            topic = ext.get("topic") or ""
            if _is_retry(topic):
                out.append((Resource.group(topic), _SUB_GET))
            else:
                out.append((Resource.topic(topic), (A.PUB, A.SUB, A.GET)))
        elif code == RC.SEND_MESSAGE:
            _send(out, ext.get("topic"), ext.get("group"))
        elif code in (RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE):
            _send(out, ext.get("b"), ext.get("a"))
        elif code == RC.RECALL_MESSAGE:
            out.append((Resource.topic(ext.get("topic") or ""), (A.PUB,)))
        elif code == RC.END_TRANSACTION:
            if (ext.get("topic") or "").strip():
                out.append((Resource.topic(ext["topic"]), (A.PUB,)))
        elif code == RC.CONSUMER_SEND_MSG_BACK:
            out.append((Resource.group(ext.get("group") or ""), (A.SUB,)))
        elif code == RC.PULL_MESSAGE:
            _topic_and_group(out, ext, (A.SUB,))
        elif code == RC.QUERY_MESSAGE:
            out.append((Resource.topic(ext.get("topic") or ""), _SUB_GET))
        elif code == RC.HEART_BEAT:
            _heartbeat(out, cmd.body)
        elif code == RC.UNREGISTER_CLIENT:
            if (ext.get("consumerGroup") or "").strip():
                out.append((Resource.group(ext["consumerGroup"]), (A.SUB,)))
        elif code == RC.GET_CONSUMER_LIST_BY_GROUP:
            out.append((Resource.group(ext.get("consumerGroup") or ""), _SUB_GET))
        elif code == RC.QUERY_CONSUMER_OFFSET:
            _topic_and_group(out, ext, _SUB_GET)
        elif code == RC.UPDATE_CONSUMER_OFFSET:
            _topic_and_group(out, ext, (A.SUB, A.UPDATE))
        elif code in (RC.LOCK_BATCH_MQ, RC.UNLOCK_BATCH_MQ):
            _sub_on_group_and_queues(out, cmd.body)
        else:
            _annotated(out, code, ext, cluster)
    except (ValueError, AttributeError, TypeError):
        raise AuthorizationError("parse authorization context error.") from None
    return out


def _annotated(out: Needed, code: int, ext: Mapping[str, str], cluster: str) -> None:
    rule = _ANNOTATED.get(code)
    if rule is None:
        return
    default_type, actions, fields = rule
    for kind, field, splitter in fields:
        value = ext.get(field)
        if value is None:
            continue
        values = [v for v in value.split(splitter) if v] if splitter else [value]
        for v in values:
            if kind is T and _is_retry(v):
                out.append((Resource.group(v), actions))
            else:
                out.append((Resource(kind, v, ResourcePattern.LITERAL), actions))
    if not out and default_type is C:
        out.append((Resource.cluster(cluster), actions))


# -- gRPC ---------------------------------------------------------------------------------------


def grpc_pub(topic: str) -> Needed:
    if not topic.strip():
        raise AuthorizationError("topic is null.")
    return [(Resource.topic(topic), (A.PUB,))]


def grpc_sub(group: str | None, topic: str | None) -> Needed:
    """SUB on the group (when given) and on the topic (when given), blank names refused."""
    out: Needed = []
    if group is not None:
        if not group.strip():
            raise AuthorizationError("group is null.")
        out.append((Resource.group(group), (A.SUB,)))
    if topic is not None:
        if not topic.strip():
            raise AuthorizationError("topic is null.")
        out.append((Resource.topic(topic), (A.SUB,)))
    return out


def grpc_route(topic: str) -> Needed:
    """QueryRoute: Pub or Sub on the topic."""
    if not topic.strip():
        raise AuthorizationError("topic is null.")
    return [(Resource.topic(topic), (A.PUB, A.SUB))]
