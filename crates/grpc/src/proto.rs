//! The messages of `apache.rocketmq.v2` the front reads and writes itself (SendMessage), written
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

/// `SystemProperties`: the fields a send uses.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SystemProperties {
    #[prost(string, optional, tag = "1")]
    pub tag: Option<String>,
    #[prost(string, repeated, tag = "2")]
    pub keys: Vec<String>,
    #[prost(string, tag = "3")]
    pub message_id: String,
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
    #[prost(message, optional, tag = "11")]
    pub delivery_timestamp: Option<Timestamp>,
    #[prost(int32, optional, tag = "16")]
    pub delivery_attempt: Option<i32>,
    #[prost(string, optional, tag = "17")]
    pub message_group: Option<String>,
    #[prost(string, optional, tag = "18")]
    pub trace_context: Option<String>,
    #[prost(message, optional, tag = "19")]
    pub orphaned_transaction_recovery_duration: Option<Timestamp>,
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
