//! The messages of `apache.rocketmq.v2` the front reads and writes itself (SendMessage,
//! ReceiveMessage, AckMessage), written
//! from the published contract (apache/rocketmq-apis, `definition.proto` and `service.proto`,
//! the copies in `python/ferromq/proxy/proto`): the field numbers and types are the contract's;
//! fields the front does not use are skipped on decoding, as protobuf lets any reader do.
//! Enums are kept as their numbers (protobuf encodes both as varints).

use std::collections::BTreeMap;

use bytes::Bytes;

/// `google.protobuf.Timestamp` and `google.protobuf.Duration` (the same two fields).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

impl Timestamp {
    /// Milliseconds, as the proxy's `Timestamps.toMillis` has them.
    pub fn millis(&self) -> i64 {
        self.seconds
            .saturating_mul(1000)
            .saturating_add(i64::from(self.nanos.div_euclid(1_000_000)))
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    #[prost(string, tag = "1")]
    pub resource_namespace: String,
    #[prost(string, tag = "2")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Digest {
    /// `DigestType`: MD5 is 2.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub checksum: String,
}

/// `DigestType.MD5`.
pub const MD5: i32 = 2;
/// `Encoding.IDENTITY`.
pub const IDENTITY: i32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct DeadLetterQueue {
    #[prost(string, tag = "1")]
    pub topic: String,
    #[prost(string, tag = "2")]
    pub message_id: String,
}

/// `SystemProperties`: the fields a send uses and a received message shows.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SystemProperties {
    #[prost(string, optional, tag = "1")]
    pub tag: Option<String>,
    #[prost(string, repeated, tag = "2")]
    pub keys: Vec<String>,
    #[prost(string, tag = "3")]
    pub message_id: String,
    #[prost(message, optional, tag = "4")]
    pub body_digest: Option<Digest>,
    /// `Encoding`: see [`GZIP`].
    #[prost(int32, tag = "5")]
    pub body_encoding: i32,
    /// `MessageType`: see [`TRANSACTION`].
    #[prost(int32, tag = "6")]
    pub message_type: i32,
    #[prost(message, optional, tag = "7")]
    pub born_timestamp: Option<Timestamp>,
    #[prost(string, tag = "8")]
    pub born_host: String,
    #[prost(message, optional, tag = "9")]
    pub store_timestamp: Option<Timestamp>,
    #[prost(string, tag = "10")]
    pub store_host: String,
    #[prost(message, optional, tag = "11")]
    pub delivery_timestamp: Option<Timestamp>,
    #[prost(string, optional, tag = "12")]
    pub receipt_handle: Option<String>,
    #[prost(int32, tag = "13")]
    pub queue_id: i32,
    #[prost(int64, optional, tag = "14")]
    pub queue_offset: Option<i64>,
    #[prost(int32, optional, tag = "16")]
    pub delivery_attempt: Option<i32>,
    #[prost(string, optional, tag = "17")]
    pub message_group: Option<String>,
    #[prost(string, optional, tag = "18")]
    pub trace_context: Option<String>,
    #[prost(message, optional, tag = "19")]
    pub orphaned_transaction_recovery_duration: Option<Timestamp>,
    #[prost(message, optional, tag = "20")]
    pub dead_letter_queue: Option<DeadLetterQueue>,
    /// RocketMQ 5.5's lite topic of a message (apache/rocketmq-apis v2.1).
    #[prost(string, optional, tag = "21")]
    pub lite_topic: Option<String>,
    /// RocketMQ 5.4's priority of a message (apache/rocketmq-apis v2.1).
    #[prost(int32, optional, tag = "22")]
    pub priority: Option<i32>,
}

/// `Encoding.GZIP`.
pub const GZIP: i32 = 2;
/// `MessageType.TRANSACTION`.
pub const TRANSACTION: i32 = 4;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Message {
    #[prost(message, optional, tag = "1")]
    pub topic: Option<Resource>,
    /// Ordered by name: the stored properties are the same for the same message.
    #[prost(btree_map = "string, string", tag = "2")]
    pub user_properties: BTreeMap<String, String>,
    #[prost(message, optional, tag = "3")]
    pub system_properties: Option<SystemProperties>,
    #[prost(bytes = "bytes", tag = "4")]
    pub body: Bytes,
}

impl Message {
    pub fn topic_name(&self) -> &str {
        self.topic.as_ref().map_or("", |t| t.name.as_str())
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SendMessageRequest {
    #[prost(message, repeated, tag = "1")]
    pub messages: Vec<Message>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    /// `Code`: see [`crate::convert::code`].
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SendResultEntry {
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    #[prost(string, tag = "2")]
    pub message_id: String,
    #[prost(string, tag = "3")]
    pub transaction_id: String,
    #[prost(int64, tag = "4")]
    pub offset: i64,
    #[prost(string, tag = "5")]
    pub recall_handle: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SendMessageResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    #[prost(message, repeated, tag = "2")]
    pub entries: Vec<SendResultEntry>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Broker {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MessageQueue {
    #[prost(message, optional, tag = "1")]
    pub topic: Option<Resource>,
    #[prost(int32, tag = "2")]
    pub id: i32,
    #[prost(message, optional, tag = "4")]
    pub broker: Option<Broker>,
}

/// `FilterType.SQL`.
pub const SQL: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct FilterExpression {
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub expression: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ReceiveMessageRequest {
    #[prost(message, optional, tag = "1")]
    pub group: Option<Resource>,
    #[prost(message, optional, tag = "2")]
    pub message_queue: Option<MessageQueue>,
    #[prost(message, optional, tag = "3")]
    pub filter_expression: Option<FilterExpression>,
    #[prost(int32, tag = "4")]
    pub batch_size: i32,
    #[prost(message, optional, tag = "5")]
    pub invisible_duration: Option<Timestamp>,
    #[prost(bool, tag = "6")]
    pub auto_renew: bool,
    #[prost(message, optional, tag = "7")]
    pub long_polling_timeout: Option<Timestamp>,
    #[prost(string, optional, tag = "8")]
    pub attempt_id: Option<String>,
}

/// One message of ReceiveMessage's stream: its status, a message, or the delivery timestamp.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReceiveMessageResponse {
    #[prost(oneof = "Received", tags = "1, 2, 3")]
    pub content: Option<Received>,
}

// Each is made, encoded and dropped at once: the size of the small variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Received {
    #[prost(message, tag = "1")]
    Status(Status),
    #[prost(message, tag = "2")]
    Message(Message),
    #[prost(message, tag = "3")]
    DeliveryTimestamp(Timestamp),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AckMessageEntry {
    #[prost(string, tag = "1")]
    pub message_id: String,
    #[prost(string, tag = "2")]
    pub receipt_handle: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AckMessageRequest {
    #[prost(message, optional, tag = "1")]
    pub group: Option<Resource>,
    #[prost(message, optional, tag = "2")]
    pub topic: Option<Resource>,
    #[prost(message, repeated, tag = "3")]
    pub entries: Vec<AckMessageEntry>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AckMessageResultEntry {
    #[prost(string, tag = "1")]
    pub message_id: String,
    #[prost(string, tag = "2")]
    pub receipt_handle: String,
    #[prost(message, optional, tag = "3")]
    pub status: Option<Status>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AckMessageResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    #[prost(message, repeated, tag = "2")]
    pub entries: Vec<AckMessageResultEntry>,
}
