"""RocketMQ's shared names and flags, in one place for the broker, the client and Spark: message
property names (Java's `MessageConst`), the properties string's separators, message and pull sys
flags (`MessageSysFlag`, `PullSysFlag`), topic prefixes and the well-known topics and groups
(`TopicValidator`, `MixAll`)."""

from __future__ import annotations

# -- the properties string: `name\x01value` entries joined by `\x02` ---------------------------
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# -- message property names (MessageConst) -----------------------------------------------------
# Names as MessageConst has them, shortened where ferromq used shorter ones.
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_TRAN_MSG = "TRAN_MSG"
# A 5.x FIFO message's group.
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
# RocketMQ 5.4's priority messages: 0 is the lowest; on a PRIORITY topic it picks the queue.
PROPERTY_PRIORITY = "_SYS_MSG_PRIORITY_"
# RocketMQ 5.5's lite topics: the lite topic of a message sent to a LITE topic.
PROPERTY_LITE_TOPIC = "__LITE_TOPIC"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_ON = "TRACE_ON"
PROPERTY_CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
# RocketMQ 5.x's timer messages: a sender sets one of the first three; the broker adds the rest.
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
# A QUERY_MESSAGE header field (not a property): look the key up as a UNIQ_KEY.
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
# ferromq's own REGISTER_BROKER field: the controller epoch of a controller-mode master (name
# servers let a later epoch take the master's id over; Java's ignore the field).
MASTER_EPOCH = "ferromqMasterEpoch"

# -- message sys flags (MessageSysFlag) ---------------------------------------------------------
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
TRANSACTION_TYPE_MASK = 0xC
SYSFLAG_COMPRESSION_TYPE_MASK = 0x700

# -- pull request sys flags (PullSysFlag) -------------------------------------------------------
PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4
PULL_FLAG_CLASS_FILTER = 0x8
PULL_FLAG_LITE_PULL = 0x10

# -- topics ---------------------------------------------------------------------------------------
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
# The topic whose config a producer's new topic copies (TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC).
AUTO_CREATE_TOPIC_KEY = "TBW102"
DEFAULT_TOPIC_QUEUE_NUMS = 4
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
# Where timer messages wait (queue 0) until they are due (RocketMQ 5.x's TimerMessageStore).
TIMER_TOPIC = "rmq_sys_wheel_timer"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT_TOPIC = "OFFSET_MOVED_EVENT"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"

# The name server's KV namespace of orderly topics' queue layout (NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG).
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"

# -- groups -------------------------------------------------------------------------------------------
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
TRANS_SYS_GROUP = "CID_RMQ_SYS_TRANS"
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
FILTERSRV_CONSUMER_GROUP = "FILTERSRV_CONSUMER"
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
SELF_TEST_GROUP_PREFIX = "SELF_TEST_"
ONS_API_GROUP_PREFIX = "CID_ONSAPI_"

# -- GET_BROKER_RUNTIME_INFO: ferromq's own keys (Java's tools ignore keys they do not know) ---------
# The broker's table topics (ferromq.tables.tiering) as a JSON list, one object per topic; the key
# is there only when the broker runs the tiering service.
RUNTIME_TABLE_TOPICS_KEY = "ferromqTableTopics"
