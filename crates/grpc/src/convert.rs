//! A 5.x client's message made a RocketMQ message, as Apache RocketMQ's proxy makes it
//! (`SendMessageActivity.buildMessage`, `GrpcValidator`): the checks a message must pass, with
//! the proxy's codes and texts, its stored properties and system flag, its type, and the queue
//! a FIFO message group goes to; and a stored record made the message a client receives
//! (`GrpcConverter.buildMessage`). The one place these rules live: the front applies them to the
//! sends it serves, and the broker's Python (`ferromq.proxy.convert`, through the binding) to
//! the sends it serves itself (cluster mode, transactions, the ACL).

use ferromq_broker::popper::{ExtraInfo, PROPERTY_POP_CK};
use ferromq_broker::sender::{MessageType, MAX_LITE_TOPIC_BYTES};
use ferromq_broker::topics::is_system_topic;
use ferromq_store::hash::java_string_hash;
use ferromq_store::message::{append_client_properties, parse_properties, property, RecordView};
use md5::Digest as _;

use crate::proto::{self, Message, SystemProperties};

/// `apache.rocketmq.v2.Code`: the values the front and the proxy's rules answer with.
pub mod code {
    macro_rules! codes {
        ($($name:ident = $value:literal,)*) => {
            $(pub const $name: i32 = $value;)*
            /// Every code above by its name in `definition.proto`'s `enum Code` (a unit test
            /// holds them to the copy in `python/ferromq/proxy/proto`).
            pub const ALL: &[(&str, i32)] = &[$((stringify!($name), $name),)*];
        };
    }

    codes! {
        OK = 20000,
        MULTIPLE_RESULTS = 30000,
        BAD_REQUEST = 40000,
        ILLEGAL_TOPIC = 40002,
        ILLEGAL_CONSUMER_GROUP = 40003,
        ILLEGAL_MESSAGE_TAG = 40004,
        ILLEGAL_MESSAGE_KEY = 40005,
        ILLEGAL_MESSAGE_GROUP = 40006,
        ILLEGAL_MESSAGE_PROPERTY_KEY = 40007,
        ILLEGAL_MESSAGE_ID = 40009,
        ILLEGAL_INVISIBLE_TIME = 40011,
        ILLEGAL_DELIVERY_TIME = 40012,
        INVALID_RECEIPT_HANDLE = 40013,
        MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014,
        MESSAGE_CORRUPTED = 40016,
        ILLEGAL_POLLING_TIME = 40018,
        ILLEGAL_LITE_TOPIC = 40020,
        MESSAGE_NOT_FOUND = 40401,
        TOPIC_NOT_FOUND = 40402,
        CONSUMER_GROUP_NOT_FOUND = 40403,
        MESSAGE_BODY_TOO_LARGE = 41301,
        MESSAGE_BODY_EMPTY = 41302,
        TOO_MANY_REQUESTS = 42900,
        MESSAGE_PROPERTIES_TOO_LARGE = 43101,
        INTERNAL_SERVER_ERROR = 50001,
        HA_NOT_AVAILABLE = 50002,
        NOT_IMPLEMENTED = 50100,
        MASTER_PERSISTENCE_TIMEOUT = 50401,
        SLAVE_PERSISTENCE_TIMEOUT = 50402,
    }

    /// The name a status message carries when nothing more is said (`Code.name()`).
    pub fn name(code: i32) -> &'static str {
        ALL.iter()
            .find(|(_, value)| *value == code)
            .map_or("", |(name, _)| name)
    }
}

/// What the Java proxy prefixes to a broker's refusal it does not map to a code of its own.
pub const PROXY_EXCEPTION: &str = "org.apache.rocketmq.proxy.common.ProxyException: ";

// Properties the 5.x protocol carries in fields of its own.
pub use ferromq_store::message::property::SHARDING_KEY;
pub const BORN_HOST: &str = "__BORNHOST";
pub const BORN_TIMESTAMP: &str = "BORN_TIMESTAMP";
pub const TRACE_CONTEXT: &str = "TRACE_CONTEXT";
pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
pub const CHECK_IMMUNITY: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
pub const DLQ_ORIGIN_TOPIC: &str = "DLQ_ORIGIN_TOPIC";
pub const DLQ_ORIGIN_MESSAGE_ID: &str = "DLQ_ORIGIN_MESSAGE_ID";

/// Names a client may not give a user property (Java's `MessageConst.STRING_HASH_SET`).
pub const SYSTEM_PROPERTIES: [&str; 53] = [
    "TRACE_ON",
    "MSG_REGION",
    "KEYS",
    "TAGS",
    "WAIT",
    "DELAY",
    "RETRY_TOPIC",
    "REAL_TOPIC",
    "REAL_QID",
    "TRAN_MSG",
    "PGROUP",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "BUYER_ID",
    "ORIGIN_MESSAGE_ID",
    "TRANSFER_FLAG",
    "CORRECTION_FLAG",
    "MQ2_FLAG",
    "RECONSUME_TIME",
    "UNIQ_KEY",
    "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME",
    "POP_CK",
    "POP_CK_OFFSET",
    "1ST_POP_TIME",
    "TRAN_PREPARED_QUEUE_OFFSET",
    "DUP_INFO",
    "EXTEND_UNIQ_INFO",
    "INSTANCE_ID",
    "CORRELATION_ID",
    "REPLY_TO_CLIENT",
    "TTL",
    "ARRIVE_TIME",
    "PUSH_REPLY_TIME",
    "CLUSTER",
    "MSG_TYPE",
    "INNER_MULTI_QUEUE_OFFSET",
    "TIMER_DELAY_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS",
    "TIMER_ENQUEUE_MS",
    "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES",
    "TIMER_OUT_MS",
    "TIMER_DEL_UNIQKEY",
    "TIMER_DELAY_LEVEL",
    "__BORNHOST",
    "BORN_TIMESTAMP",
    "DLQ_ORIGIN_TOPIC",
    "DLQ_ORIGIN_MESSAGE_ID",
    "__CRC32#",
    "_SYS_MSG_PRIORITY_",
    "__LITE_TOPIC",
];

pub const SYSFLAG_COMPRESSED: i32 = 0x1;
pub const SYSFLAG_TRANSACTION_PREPARED: i32 = 0x4;

// The proxy's limits (ProxyConfig defaults).
pub const MAX_BODY_SIZE: usize = 4 * 1024 * 1024;
pub const MAX_USER_PROPERTIES: usize = 128;
pub const MAX_USER_PROPERTY_BYTES: usize = 16384;
pub const MAX_MESSAGE_GROUP_SIZE: usize = 64;
pub const MAX_DELAY_MS: i64 = 86_400_000;
pub const MAX_TRANSACTION_RECOVERY_SECONDS: i64 = 3600;
pub const MAX_TOPIC_LENGTH: usize = 127;
pub const MAX_GROUP_LENGTH: usize = 255;
/// Groups the broker keeps to itself.
pub const SYSTEM_GROUP_PREFIX: &str = "CID_RMQ_SYS_";

/// A send refused before anything is stored: the status the call is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: i32,
    pub message: String,
}

fn refuse<T>(code: i32, message: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal {
        code,
        message: message.into(),
    })
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

fn control(text: &str) -> bool {
    text.chars().any(char::is_control)
}

fn blank(text: &str) -> bool {
    text.trim().is_empty()
}

/// The shortest invisible duration a receive may ask for (the proxy's
/// `minInvisibleTimeMillsForRecv`); a change of a received message's may go down to 0.
pub const MIN_RECEIVE_INVISIBLE_MS: i64 = 10_000;
/// The longest invisible duration (the proxy's `maxInvisibleTimeMills`, 12 hours).
pub const MAX_INVISIBLE_MS: i64 = 43_200_000;

/// ILLEGAL_INVISIBLE_TIME, with the proxy's texts, for an invisible duration outside
/// `[min, MAX_INVISIBLE_MS]`.
pub fn check_invisible(ms: i64, min: i64) -> Result<(), Refusal> {
    if ms < min {
        return refuse(
            code::ILLEGAL_INVISIBLE_TIME,
            format!("the invisibleTime is too small. min is {min}"),
        );
    }
    if ms > MAX_INVISIBLE_MS {
        return refuse(
            code::ILLEGAL_INVISIBLE_TIME,
            format!("the invisibleTime is too large. max is {MAX_INVISIBLE_MS}"),
        );
    }
    Ok(())
}

/// The proxy's bounds of a receive's long polling (`minLongPollingTimeoutMillis`,
/// `maxLongPollingTimeoutMillis`).
pub const MIN_POLLING_MS: i64 = 5_000;
pub const MAX_POLLING_MS: i64 = 20_000;

/// How long a receive that finds nothing waits (ms), as the proxy's `ReceiveMessageActivity`
/// reckons it: the client's long polling timeout, else the call's time left less half the
/// client's request timeout; within [MIN_POLLING_MS, MAX_POLLING_MS]; cut to the time left
/// (`remaining_ms`, None: no deadline), which must leave MIN_POLLING_MS.
pub fn polling_time(
    long_polling_ms: Option<i64>,
    request_timeout_ms: Option<i64>,
    remaining_ms: Option<i64>,
) -> Result<i64, Refusal> {
    let remaining = remaining_ms.unwrap_or(MAX_POLLING_MS);
    let asked = long_polling_ms.unwrap_or_else(|| remaining - request_timeout_ms.unwrap_or(0) / 2);
    let polling = asked.clamp(MIN_POLLING_MS, MAX_POLLING_MS);
    if polling <= remaining {
        return Ok(polling);
    }
    if remaining < MIN_POLLING_MS {
        return refuse(
            code::ILLEGAL_POLLING_TIME,
            "The deadline time remaining is not enough for polling, please check network condition",
        );
    }
    Ok(remaining)
}

/// A send the broker answered with `send_code` (not SUCCESS), as the proxy answers the entry:
/// the persistence and replica timeouts keep their meaning, any other failure is an internal
/// error; the text names the broker's code (`name`).
pub fn send_failure(send_code: i32, name: &str) -> Refusal {
    use ferromq_remoting::codes::{FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE};
    let code = match send_code {
        FLUSH_DISK_TIMEOUT => code::MASTER_PERSISTENCE_TIMEOUT,
        FLUSH_SLAVE_TIMEOUT => code::SLAVE_PERSISTENCE_TIMEOUT,
        SLAVE_NOT_AVAILABLE => code::HA_NOT_AVAILABLE,
        _ => code::INTERNAL_SERVER_ERROR,
    };
    Refusal {
        code,
        message: format!("send message failed, sendStatus={name}"),
    }
}

/// Whether a topic name is one a client may use (`^[%|a-zA-Z0-9_-]+$`, at most 127, not a
/// system topic: `GrpcValidator.validateTopic`); the text of ILLEGAL_TOPIC when not. The one
/// rule for the front and Python's service (`grpc_check_topic`), for every call that names a
/// topic. `reserved`: the broker's own system topics beside every broker's (its cluster, its
/// name, its reply topic), which Java's proxy refuses in local mode; the front serves none of
/// them (they are not among the plane's sends), so only Python's service names them.
pub fn check_topic_among(name: &str, reserved: &[String]) -> Result<(), Refusal> {
    check_topic(name)?;
    if reserved.iter().any(|r| r == name) {
        return system_topic();
    }
    Ok(())
}

fn system_topic() -> Result<(), Refusal> {
    refuse(code::ILLEGAL_TOPIC, "cannot access system topic")
}

/// [`check_topic_among`] every broker's system topics only.
pub fn check_topic(name: &str) -> Result<(), Refusal> {
    if blank(name) {
        return refuse(code::ILLEGAL_TOPIC, "The specified topic is blank");
    }
    if java_length(name) > MAX_TOPIC_LENGTH {
        return refuse(
            code::ILLEGAL_TOPIC,
            "The specified topic is longer than topic max length 127.",
        );
    }
    if !legal_chars(name) {
        return refuse(
            code::ILLEGAL_TOPIC,
            format!(
                "The specified topic[{name}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
            ),
        );
    }
    if is_system_topic(name) {
        return system_topic();
    }
    Ok(())
}

/// Whether a group name is one a client may use (`^[%|a-zA-Z0-9_-]+$`, at most 255, not a
/// system group); the text of ILLEGAL_CONSUMER_GROUP when not.
pub fn check_group(name: &str) -> Result<(), Refusal> {
    if blank(name) {
        return refuse(code::ILLEGAL_CONSUMER_GROUP, "the specified group is blank");
    }
    if java_length(name) > MAX_GROUP_LENGTH {
        return refuse(
            code::ILLEGAL_CONSUMER_GROUP,
            format!("the specified group is longer than group max length {MAX_GROUP_LENGTH}."),
        );
    }
    if !legal_chars(name) {
        return refuse(
            code::ILLEGAL_CONSUMER_GROUP,
            format!(
                "the specified group[{name}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
            ),
        );
    }
    if name.starts_with(SYSTEM_GROUP_PREFIX) {
        return refuse(
            code::ILLEGAL_CONSUMER_GROUP,
            "cannot use system consumer group",
        );
    }
    Ok(())
}

/// A name's length as Java counts it (`String.length()`: UTF-16 units).
fn java_length(name: &str) -> usize {
    name.encode_utf16().count()
}

/// Only the characters of `^[%|a-zA-Z0-9_-]+$` (topic and group names).
fn legal_chars(name: &str) -> bool {
    name.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '_' | '-'))
}

/// The checks of SendMessageActivity on one message, in its order (the first that fails).
/// GrpcValidator.validateLiteTopic: a lite topic of a send or a subscription is letters, digits, '-'
/// and '_', at most the proxy's maxLiteTopicSize (64) bytes.
pub fn check_lite_topic(lite: &str) -> Result<(), Refusal> {
    if blank(lite) {
        return refuse(
            code::ILLEGAL_LITE_TOPIC,
            "lite topic cannot be the char sequence of whitespace",
        );
    }
    if lite.len() > MAX_LITE_TOPIC_BYTES {
        return refuse(
            code::ILLEGAL_LITE_TOPIC,
            format!("lite topic exceed the max size {MAX_LITE_TOPIC_BYTES}"),
        );
    }
    if !lite
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return refuse(
            code::ILLEGAL_LITE_TOPIC,
            "lite topic can only contain alphanumeric characters, hyphens(-), and underscores(_)",
        );
    }
    Ok(())
}

pub fn validate(m: &Message, now_ms: i64) -> Result<(), Refusal> {
    if m.body.is_empty() {
        return refuse(code::MESSAGE_BODY_EMPTY, "message body cannot be empty");
    }
    if m.body.len() > MAX_BODY_SIZE {
        return refuse(
            code::MESSAGE_BODY_TOO_LARGE,
            format!("message body cannot exceed the max {MAX_BODY_SIZE}"),
        );
    }
    if m.user_properties.len() > MAX_USER_PROPERTIES {
        return refuse(
            code::MESSAGE_PROPERTIES_TOO_LARGE,
            format!("too many user properties, max is {MAX_USER_PROPERTIES}"),
        );
    }
    let mut size = 0;
    for (key, value) in &m.user_properties {
        if SYSTEM_PROPERTIES.contains(&key.as_str()) {
            return refuse(
                code::ILLEGAL_MESSAGE_PROPERTY_KEY,
                format!("property is used by system: {key}"),
            );
        }
        if control(key) {
            return refuse(
                code::ILLEGAL_MESSAGE_PROPERTY_KEY,
                "the key of property cannot contain control character",
            );
        }
        if control(value) {
            return refuse(
                code::ILLEGAL_MESSAGE_PROPERTY_KEY,
                "the value of property cannot contain control character",
            );
        }
        size += key.len() + value.len();
    }
    let default = SystemProperties::default();
    let sp = m.system_properties.as_ref().unwrap_or(&default);
    if let Some(tag) = &sp.tag {
        if !tag.is_empty() && blank(tag) {
            return refuse(
                code::ILLEGAL_MESSAGE_TAG,
                "tag cannot be the char sequence of whitespace",
            );
        }
        if tag.contains('|') {
            return refuse(code::ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'");
        }
        if control(tag) {
            return refuse(
                code::ILLEGAL_MESSAGE_TAG,
                "tag cannot contain control character",
            );
        }
        size += tag.len();
    }
    for key in &sp.keys {
        if blank(key) {
            return refuse(
                code::ILLEGAL_MESSAGE_KEY,
                "key cannot be the char sequence of whitespace",
            );
        }
        if control(key) {
            return refuse(
                code::ILLEGAL_MESSAGE_KEY,
                "key cannot contain control character",
            );
        }
        size += key.len();
    }
    if size > MAX_USER_PROPERTY_BYTES {
        return refuse(
            code::MESSAGE_PROPERTIES_TOO_LARGE,
            format!(
                "the total size of user property is too large, max is {MAX_USER_PROPERTY_BYTES}"
            ),
        );
    }
    if blank(&sp.message_id) {
        return refuse(code::ILLEGAL_MESSAGE_ID, "message id cannot be empty");
    }
    if sp.message_type == proto::TRANSACTION {
        if let Some(d) = &sp.orphaned_transaction_recovery_duration {
            if d.seconds > MAX_TRANSACTION_RECOVERY_SECONDS {
                return refuse(
                    code::BAD_REQUEST,
                    format!("the max transaction recovery time of message is too large, max is {MAX_TRANSACTION_RECOVERY_SECONDS}"),
                );
            }
        }
    }
    if let Some(at) = &sp.delivery_timestamp {
        if at.millis().saturating_sub(now_ms) > MAX_DELAY_MS {
            return refuse(
                code::ILLEGAL_DELIVERY_TIME,
                format!("the max delay time of message is too large, max is {MAX_DELAY_MS}"),
            );
        }
    }
    if let Some(lite) = sp.lite_topic.as_ref().filter(|l| !l.is_empty()) {
        check_lite_topic(lite)?;
    }
    if sp.priority.is_some_and(|p| p < 0) {
        // Message.setPriority's IllegalArgumentException, which the proxy answers as an
        // internal error with the exception's detail (ExceptionUtils.getErrorDetailMessage).
        return refuse(
            code::INTERNAL_SERVER_ERROR,
            "The priority must be greater than or equal to 0. IllegalArgumentException. \
             org.apache.rocketmq.common.message.Message.setPriority(Message.java:161)",
        );
    }
    if let Some(group) = &sp.message_group {
        if blank(group) {
            return refuse(
                code::ILLEGAL_MESSAGE_GROUP,
                "message group cannot be the char sequence of whitespace",
            );
        }
        if group.len() >= MAX_MESSAGE_GROUP_SIZE {
            return refuse(
                code::ILLEGAL_MESSAGE_GROUP,
                format!("message group exceed the max size {MAX_MESSAGE_GROUP_SIZE}"),
            );
        }
        if control(group) {
            return refuse(
                code::ILLEGAL_MESSAGE_GROUP,
                "message group cannot contain control character",
            );
        }
    }
    Ok(())
}

/// A checked message as the broker stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The stored properties, encoded (`name\x01value` joined by `\x02`).
    pub properties: String,
    pub sys_flag: i32,
    /// Zero when the client gave none (the store's clock then).
    pub born_timestamp: i64,
    pub message_type: MessageType,
    /// Its FIFO message group, when it has one.
    pub message_group: Option<String>,
}

/// Properties in the order they were first set; a later set replaces the value.
struct Properties(Vec<(String, String)>);

impl Properties {
    fn set(&mut self, name: &str, value: String) {
        match self.0.iter_mut().find(|(k, _)| k == name) {
            Some(entry) => entry.1 = value,
            None => self.0.push((name.to_string(), value)),
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The RocketMQ message of a checked v2 message (SendMessageActivity.buildMessage); `peer` is
/// the client's `ip:port`, its born host when it names none. Refused when a field would break
/// the stored properties (their separators), which no check above rules out for every field.
pub fn to_store(m: &Message, peer: &str) -> Result<Outgoing, Refusal> {
    let default = SystemProperties::default();
    let sp = m.system_properties.as_ref().unwrap_or(&default);
    let topic = m.topic_name();
    let mut props = Properties(
        m.user_properties
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    );
    props.set(property::TAGS, sp.tag.clone().unwrap_or_default());
    if !sp.keys.is_empty() {
        props.set(property::KEYS, sp.keys.join(" "));
    }
    props.set(property::UNIQ_KEY, sp.message_id.clone());
    let mut sys_flag = 0;
    if sp.message_type == proto::TRANSACTION {
        props.set(property::TRAN_MSG, "true".to_string());
        if let Some(d) = &sp.orphaned_transaction_recovery_duration {
            props.set(CHECK_IMMUNITY, d.seconds.to_string());
        }
        sys_flag |= SYSFLAG_TRANSACTION_PREPARED;
    }
    if sp.body_encoding == proto::GZIP {
        sys_flag |= SYSFLAG_COMPRESSED;
    }
    if let Some(at) = &sp.delivery_timestamp {
        props.set(property::TIMER_DELIVER_MS, at.millis().to_string());
    }
    if let Some(priority) = sp.priority {
        props.set(property::PRIORITY, priority.to_string());
    }
    if let Some(lite) = sp.lite_topic.as_ref().filter(|l| !l.is_empty()) {
        props.set(property::LITE_TOPIC, lite.clone());
    }
    props.set(RECONSUME_TIME, sp.delivery_attempt.unwrap_or(0).to_string());
    props.set(property::PRODUCER_GROUP, topic.to_string());
    if let Some(group) = sp.message_group.as_ref().filter(|g| !g.is_empty()) {
        props.set(SHARDING_KEY, group.clone());
    }
    if let Some(trace) = sp.trace_context.as_ref().filter(|t| !t.is_empty()) {
        props.set(TRACE_CONTEXT, trace.clone());
    }
    let born_host = if sp.born_host.is_empty() {
        peer
    } else {
        &sp.born_host
    };
    props.set(BORN_HOST, born_host.to_string());
    let born = sp
        .born_timestamp
        .as_ref()
        .map_or(0, proto::Timestamp::millis);
    if born > 0 {
        props.set(BORN_TIMESTAMP, born.to_string());
    }
    // Encoded as a client encodes them (the store's one encoder), a separator in a name or value
    // refused.
    let mut encoded = Vec::new();
    let pairs = props.0.iter().map(|(k, v)| (k.as_str(), Some(v.as_str())));
    if let Err(name) = append_client_properties(&mut encoded, pairs) {
        return refuse(
            code::BAD_REQUEST,
            format!("property {name} contains a RocketMQ separator character"),
        );
    }
    let properties = String::from_utf8(encoded).expect("joined from strings");
    Ok(Outgoing {
        message_type: MessageType::of_message(|name| props.get(name)),
        message_group: props.get(SHARDING_KEY).map(str::to_string),
        properties,
        sys_flag,
        born_timestamp: born,
    })
}

/// The write queue of a message group among `queues`: Guava's `consistentHash` of the group's
/// Java hash code, as the proxy's SendMessageQueueSelector picks it (a group keeps its queue
/// while the count does).
pub fn fifo_queue(message_group: &str, queues: usize) -> usize {
    let mut state = java_string_hash(message_group) as i64 as u64;
    let mut candidate: usize = 0;
    loop {
        state = state.wrapping_mul(2862933555777941757).wrapping_add(1);
        let d = ((state >> 33) + 1) as f64 / f64::from(1u32 << 31);
        let following = ((candidate + 1) as f64 / d) as i64;
        if following >= 0 && (following as usize) < queues {
            candidate = following as usize;
        } else {
            return candidate;
        }
    }
}

/// A message type as the protocol numbers it (`MessageType`; MIXED is a topic's only).
pub fn type_number(t: MessageType) -> i32 {
    match t {
        MessageType::Normal => 1,
        MessageType::Fifo => 2,
        MessageType::Delay => 3,
        MessageType::Transaction => 4,
        MessageType::Lite => 5,
        MessageType::Priority => 6,
        MessageType::Unspecified | MessageType::Mixed => 0,
    }
}

/// A point in time (milliseconds since the epoch) as a Timestamp.
pub fn timestamp(ms: i64) -> proto::Timestamp {
    proto::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

fn digits(text: &str) -> Option<i64> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

/// A stored record as a 5.x client receives it (GrpcConverter.buildMessage): `topic` is the one
/// it asked for (a retry message shows its original topic), `receipt_handle` the one to ack it
/// with.
pub fn to_v2(view: &RecordView<'_>, topic: &str, receipt_handle: Option<String>) -> Message {
    let props = parse_properties(view.properties);
    let get = |name: &str| props.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    let born_ip = view.born_host.to_string();
    let born_ip = born_ip
        .rsplit_once(':')
        .map_or(born_ip.as_str(), |(ip, _)| ip);
    let delivery = match get(property::TIMER_DELAY_SEC).and_then(digits) {
        Some(seconds) => Some(view.born_timestamp + seconds * 1000),
        None => get(property::TIMER_DELIVER_MS).and_then(digits),
    };
    let dead_letter_queue = match (get(DLQ_ORIGIN_TOPIC), get(DLQ_ORIGIN_MESSAGE_ID)) {
        (Some(topic), Some(message_id)) => Some(proto::DeadLetterQueue {
            topic: topic.to_string(),
            message_id: message_id.to_string(),
        }),
        _ => None,
    };
    let digest = md5::Md5::digest(view.body);
    let sp = SystemProperties {
        tag: get(property::TAGS).map(str::to_string),
        keys: get(property::KEYS)
            .map(|k| {
                k.split(' ')
                    .filter(|k| !k.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        message_id: get(property::UNIQ_KEY).map_or_else(|| view.offset_msg_id(), str::to_string),
        body_digest: Some(proto::Digest {
            r#type: proto::MD5,
            checksum: digest.iter().map(|b| format!("{b:02X}")).collect(),
        }),
        body_encoding: if view.sys_flag & SYSFLAG_COMPRESSED != 0 {
            proto::GZIP
        } else {
            proto::IDENTITY
        },
        message_type: type_number(MessageType::of_message(get)),
        born_timestamp: Some(timestamp(view.born_timestamp)),
        born_host: get(BORN_HOST).unwrap_or(born_ip).to_string(),
        store_timestamp: Some(timestamp(view.store_timestamp)),
        store_host: view.store_host.to_string(),
        delivery_timestamp: delivery.map(timestamp),
        receipt_handle,
        queue_id: view.queue_id,
        queue_offset: Some(view.queue_offset),
        delivery_attempt: Some(view.reconsume_times.saturating_add(1)),
        message_group: get(SHARDING_KEY).map(str::to_string),
        trace_context: get(TRACE_CONTEXT).map(str::to_string),
        dead_letter_queue,
        priority: get(property::PRIORITY)
            .and_then(|p| p.parse().ok())
            .filter(|p: &i32| *p >= 0),
        lite_topic: get(property::LITE_TOPIC).map(str::to_string),
        ..Default::default()
    };
    Message {
        topic: Some(proto::Resource {
            resource_namespace: String::new(),
            name: topic.to_string(),
        }),
        user_properties: props
            .iter()
            .filter(|(k, _)| !SYSTEM_PROPERTIES.contains(k))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        system_properties: Some(sp),
        body: bytes::Bytes::copy_from_slice(view.body),
    }
}

/// What a pop's receipts are made of, besides each record's own fields.
pub struct PopFields<'a> {
    pub pop_time: i64,
    pub invisible_time: i64,
    pub revive_qid: i32,
    pub broker_name: &'a str,
}

/// The receipt handle a popped record is acked with: its `POP_CK` (a retried message has one),
/// else the pop's receipt for its queue (`start_of(queue_id)`: where the pop started reading
/// it), then the record's CommitLog offset. Also returns the receipt alone.
pub fn receipt_handle(
    view: &RecordView<'_>,
    pop: &PopFields<'_>,
    start_of: impl Fn(i32) -> Option<i64>,
) -> (String, String) {
    let receipt = match view.property(PROPERTY_POP_CK) {
        Some(ck) => ck.to_string(),
        None => ExtraInfo {
            ck_offset: start_of(view.queue_id).unwrap_or(view.queue_offset),
            pop_time: pop.pop_time,
            invisible_time: pop.invisible_time,
            revive_qid: pop.revive_qid,
            mark: "0".into(),
            broker_name: pop.broker_name.to_string(),
            queue_id: view.queue_id,
            offset: view.queue_offset,
        }
        .to_string(),
    };
    let handle = format!("{receipt} {}", view.physical_offset);
    (handle, receipt)
}

/// The receipt handle of a lite message (RocketMQ 5.5), as 5.5.0's client API builds it from a POP_LITE
/// reply (`processPopLiteResponse`): the pop's receipt for queue 0 of the lite topic's light message
/// queue at the record's offset there (its one INNER_MULTI_QUEUE_OFFSET), the parent topic's retry
/// mark ("0": a lite topic has no retry topic), then the record's CommitLog offset. None for a
/// record that names no single light message queue.
pub fn lite_receipt_handle(view: &RecordView<'_>, pop: &PopFields<'_>) -> Option<String> {
    let props = parse_properties(view.properties);
    let get = |name: &str| props.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    let queues = get(ferromq_store::lmq::INNER_MULTI_DISPATCH)?;
    let offset = get(ferromq_store::lmq::INNER_MULTI_QUEUE_OFFSET)?;
    if queues.contains(',') || offset.contains(',') {
        return None;
    }
    let receipt = ExtraInfo {
        ck_offset: 0,
        pop_time: pop.pop_time,
        invisible_time: pop.invisible_time,
        revive_qid: pop.revive_qid,
        mark: "0".into(),
        broker_name: pop.broker_name.to_string(),
        queue_id: 0,
        offset: offset.parse().ok()?,
    };
    Some(format!("{receipt} {}", view.physical_offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polling_time_as_the_proxy_reckons_it() {
        // The client's timeout within the bounds, cut to the deadline.
        assert_eq!(polling_time(Some(5_000), None, Some(30_000)), Ok(5_000));
        assert_eq!(polling_time(Some(1_000), None, None), Ok(MIN_POLLING_MS));
        assert_eq!(
            polling_time(Some(60_000), None, Some(60_000)),
            Ok(MAX_POLLING_MS)
        );
        assert_eq!(polling_time(Some(15_000), None, Some(8_000)), Ok(8_000));
        // Without one: the time left less half the request timeout.
        assert_eq!(polling_time(None, Some(6_000), Some(13_000)), Ok(10_000));
        assert_eq!(polling_time(None, None, None), Ok(MAX_POLLING_MS));
        let refused = polling_time(Some(5_000), None, Some(4_000)).unwrap_err();
        assert_eq!(refused.code, code::ILLEGAL_POLLING_TIME);
        assert!(refused
            .message
            .starts_with("The deadline time remaining is not enough"));
    }
    use crate::proto::{Resource, Timestamp};

    fn message(body: &[u8]) -> Message {
        Message {
            topic: Some(Resource {
                resource_namespace: String::new(),
                name: "T".into(),
            }),
            user_properties: Default::default(),
            system_properties: Some(SystemProperties {
                message_id: "01ABC".into(),
                ..Default::default()
            }),
            body: bytes::Bytes::copy_from_slice(body),
        }
    }

    #[test]
    fn checks_come_in_the_proxys_order_with_its_codes() {
        assert_eq!(
            validate(&message(b""), 0).unwrap_err().code,
            code::MESSAGE_BODY_EMPTY
        );
        let mut m = message(b"x");
        m.user_properties.insert("KEYS".into(), "k".into());
        let e = validate(&m, 0).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                code::ILLEGAL_MESSAGE_PROPERTY_KEY,
                "property is used by system: KEYS"
            )
        );
        let mut m = message(b"x");
        m.system_properties.as_mut().unwrap().tag = Some("a|b".into());
        assert_eq!(validate(&m, 0).unwrap_err().code, code::ILLEGAL_MESSAGE_TAG);
        let mut m = message(b"x");
        m.system_properties.as_mut().unwrap().message_group = Some("g".repeat(64));
        assert_eq!(
            validate(&m, 0).unwrap_err().code,
            code::ILLEGAL_MESSAGE_GROUP
        );
        let mut m = message(b"x");
        m.system_properties.as_mut().unwrap().delivery_timestamp = Some(Timestamp {
            seconds: 86_401,
            nanos: 0,
        });
        assert_eq!(
            validate(&m, 0).unwrap_err().code,
            code::ILLEGAL_DELIVERY_TIME
        );
        assert!(validate(&message(b"x"), 0).is_ok());
    }

    #[test]
    fn a_message_group_makes_a_fifo_message_with_a_sharding_key() {
        let mut m = message(b"x");
        let sp = m.system_properties.as_mut().unwrap();
        sp.message_group = Some("g1".into());
        sp.tag = Some("TagA".into());
        sp.keys = vec!["k1".into(), "k2".into()];
        let out = to_store(&m, "127.0.0.1:5000").unwrap();
        assert_eq!(out.message_type, MessageType::Fifo);
        assert_eq!(out.message_group.as_deref(), Some("g1"));
        let expected = "TAGS\u{1}TagA\u{2}KEYS\u{1}k1 k2\u{2}UNIQ_KEY\u{1}01ABC\u{2}\
            RECONSUME_TIME\u{1}0\u{2}PGROUP\u{1}T\u{2}__SHARDINGKEY\u{1}g1\u{2}\
            __BORNHOST\u{1}127.0.0.1:5000";
        assert_eq!(out.properties, expected);
    }

    #[test]
    fn a_separator_in_a_field_no_check_covers_is_refused() {
        let mut m = message(b"x");
        m.system_properties.as_mut().unwrap().trace_context = Some("a\u{2}b".into());
        assert_eq!(to_store(&m, "p").unwrap_err().code, code::BAD_REQUEST);
    }

    #[test]
    fn fifo_queues_stay_in_range_and_stable() {
        for queues in 1..20 {
            let q = fifo_queue("group-7", queues);
            assert!(q < queues);
            assert_eq!(q, fifo_queue("group-7", queues));
        }
        assert_eq!(fifo_queue("anything", 1), 0);
    }

    #[test]
    fn invisible_bounds_and_send_failures_answer_as_the_proxy() {
        assert!(check_invisible(MIN_RECEIVE_INVISIBLE_MS, MIN_RECEIVE_INVISIBLE_MS).is_ok());
        assert!(check_invisible(MAX_INVISIBLE_MS, 0).is_ok());
        let small = check_invisible(9_999, MIN_RECEIVE_INVISIBLE_MS).unwrap_err();
        assert_eq!(small.code, code::ILLEGAL_INVISIBLE_TIME);
        assert_eq!(
            small.message,
            "the invisibleTime is too small. min is 10000"
        );
        let large = check_invisible(MAX_INVISIBLE_MS + 1, 0).unwrap_err();
        assert_eq!(
            large.message,
            "the invisibleTime is too large. max is 43200000"
        );
        let failed = send_failure(
            ferromq_remoting::codes::FLUSH_DISK_TIMEOUT,
            "FLUSH_DISK_TIMEOUT",
        );
        assert_eq!(failed.code, code::MASTER_PERSISTENCE_TIMEOUT);
        assert_eq!(
            failed.message,
            "send message failed, sendStatus=FLUSH_DISK_TIMEOUT"
        );
        let other = send_failure(
            ferromq_remoting::codes::SERVICE_NOT_AVAILABLE,
            "SERVICE_NOT_AVAILABLE",
        );
        assert_eq!(other.code, code::INTERNAL_SERVER_ERROR);
    }

    /// `enum Code` of the vendored `definition.proto`: name to number.
    fn proto_codes() -> std::collections::HashMap<String, i32> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../python/ferromq/proxy/proto/apache/rocketmq/v2/definition.proto"
        );
        let text = std::fs::read_to_string(path).expect("the vendored definition.proto");
        let start = text.find("enum Code {").expect("enum Code");
        let body = &text[start..start + text[start..].find('}').expect("its end")];
        body.lines()
            .filter_map(|line| {
                let line = line.split("//").next()?.trim();
                let (name, number) = line.strip_suffix(';')?.split_once('=')?;
                Some((name.trim().to_string(), number.trim().parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn every_code_is_the_protos() {
        let proto = proto_codes();
        assert!(proto.len() > 40, "{proto:?}");
        for (name, value) in code::ALL {
            assert_eq!(proto.get(*name), Some(value), "Code.{name}");
            assert_eq!(code::name(*value), *name);
        }
    }

    #[test]
    fn topic_names_a_client_may_use() {
        assert!(check_topic("TopicTest").is_ok());
        assert!(check_topic("%RETRY%G").is_ok());
        for name in [
            "TBW102",
            "SCHEDULE_TOPIC_XXXX",
            "RMQ_SYS_TRANS_HALF_TOPIC",
            "rmq_sys_x",
        ] {
            let r = check_topic(name).unwrap_err();
            assert_eq!(r.code, code::ILLEGAL_TOPIC, "{name}");
            assert_eq!(r.message, "cannot access system topic");
        }
        let r = check_topic("X\n").unwrap_err();
        assert!(r.message.contains("illegal characters"), "{r}");
        // Java counts UTF-16 units: 64 characters outside the BMP are 128, too long.
        let r = check_topic(&"\u{1F600}".repeat(64)).unwrap_err();
        assert!(r.message.contains("longer than"), "{r}");
        let r = check_group("CID_RMQ_SYS_X").unwrap_err();
        assert_eq!(r.code, code::ILLEGAL_CONSUMER_GROUP);
        // A broker's own system topics, given.
        let own = ["DefaultCluster".to_string()];
        assert!(check_topic_among("DefaultCluster", &[]).is_ok());
        let r = check_topic_among("DefaultCluster", &own).unwrap_err();
        assert_eq!(
            (r.code, r.message.as_str()),
            (code::ILLEGAL_TOPIC, "cannot access system topic")
        );
        assert!(check_topic_among("TopicTest", &own).is_ok());
    }
}
