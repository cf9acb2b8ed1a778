//! The RocketMQ 4.x stored-message record: the same bytes live in CommitLog files and travel in
//! pull, view and query responses, so this module is the single definition of the layout.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::Range;

use crate::error::{Result, StoreError};

pub const MESSAGE_MAGIC_CODE: i32 = 0xDAA3_20A7_u32 as i32;
pub const BLANK_MAGIC_CODE: i32 = 0xCBD4_3194_u32 as i32;
/// An end-of-file blank record is TOTALSIZE + magic.
pub const END_FILE_MIN_BLANK_LENGTH: usize = 8;

pub mod sysflag {
    pub const COMPRESSED: i32 = 0x1;
    pub const MULTI_TAGS: i32 = 0x2;
    pub const TRANSACTION_NOT_TYPE: i32 = 0x0;
    pub const TRANSACTION_PREPARED_TYPE: i32 = 0x4;
    pub const TRANSACTION_COMMIT_TYPE: i32 = 0x8;
    pub const TRANSACTION_ROLLBACK_TYPE: i32 = 0xC;
    pub const BORNHOST_V6: i32 = 0x10;
    pub const STOREHOST_V6: i32 = 0x20;
    /// 4.9.4+: the codec of a compressed body (0 or 3 zlib, 1 LZ4, 2 zstd).
    pub const COMPRESSION_TYPE: i32 = 0x700;

    pub fn transaction_value(flag: i32) -> i32 {
        flag & 0xC
    }
}

pub const NAME_VALUE_SEPARATOR: char = '\u{1}';
pub const PROPERTY_SEPARATOR: char = '\u{2}';
pub const MAX_TOPIC_LENGTH: usize = 127;
pub const MAX_PROPERTIES_LENGTH: usize = i16::MAX as usize;

pub mod property {
    pub const TAGS: &str = "TAGS";
    pub const KEYS: &str = "KEYS";
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    pub const DELAY: &str = "DELAY";
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    pub const REAL_QID: &str = "REAL_QID";
    pub const CLUSTER: &str = "CLUSTER";
    pub const PRODUCER_GROUP: &str = "PGROUP";
    pub const WAIT: &str = "WAIT";
    pub const TRAN_MSG: &str = "TRAN_MSG";
    /// A FIFO message's group (5.x's message group).
    pub const SHARDING_KEY: &str = "__SHARDINGKEY";
    /// RocketMQ 5.4's priority of a message (0 lowest; its queue on a PRIORITY topic).
    pub const PRIORITY: &str = "_SYS_MSG_PRIORITY_";
    /// RocketMQ 5.5's lite topic of a message (its light message queue under its topic).
    pub const LITE_TOPIC: &str = "__LITE_TOPIC";
    /// The light message queues a record is dispatched to (see [`crate::lmq`]).
    pub const INNER_MULTI_DISPATCH: &str = "INNER_MULTI_DISPATCH";
    /// Its offset in each, set at append.
    pub const INNER_MULTI_QUEUE_OFFSET: &str = "INNER_MULTI_QUEUE_OFFSET";
    // RocketMQ 5.x's timer messages: what a sender sets (one of three), what the broker adds.
    pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
    pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
    pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
    pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
    pub const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
    pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
    pub const TIMER_ROLL_TIMES: &str = "TIMER_ROLL_TIMES";
    /// A recall: `REAL_TOPIC+UNIQ_KEY` of the timer message it cancels.
    pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";

    /// Every name above with the name Python gives it (`PROPERTY_X` in ferromq.protocol).
    pub const ALL: [(&str, &str); 21] = [
        ("PROPERTY_TAGS", TAGS),
        ("PROPERTY_KEYS", KEYS),
        ("PROPERTY_UNIQ_KEY", UNIQ_KEY),
        ("PROPERTY_DELAY", DELAY),
        ("PROPERTY_REAL_TOPIC", REAL_TOPIC),
        ("PROPERTY_REAL_QID", REAL_QID),
        ("PROPERTY_CLUSTER", CLUSTER),
        ("PROPERTY_PRODUCER_GROUP", PRODUCER_GROUP),
        ("PROPERTY_WAIT", WAIT),
        ("PROPERTY_TRAN_MSG", TRAN_MSG),
        ("PROPERTY_SHARDING_KEY", SHARDING_KEY),
        ("PROPERTY_PRIORITY", PRIORITY),
        ("PROPERTY_LITE_TOPIC", LITE_TOPIC),
        ("PROPERTY_TIMER_DELIVER_MS", TIMER_DELIVER_MS),
        ("PROPERTY_TIMER_DELAY_SEC", TIMER_DELAY_SEC),
        ("PROPERTY_TIMER_DELAY_MS", TIMER_DELAY_MS),
        ("PROPERTY_TIMER_OUT_MS", TIMER_OUT_MS),
        ("PROPERTY_TIMER_ENQUEUE_MS", TIMER_ENQUEUE_MS),
        ("PROPERTY_TIMER_DEQUEUE_MS", TIMER_DEQUEUE_MS),
        ("PROPERTY_TIMER_ROLL_TIMES", TIMER_ROLL_TIMES),
        ("PROPERTY_TIMER_DEL_UNIQKEY", TIMER_DEL_UNIQKEY),
    ];
}

/// Byte positions of the fixed fields (IPv4 born host; later fields shift by 12 per IPv6 host).
pub mod pos {
    pub const TOTAL_SIZE: usize = 0;
    pub const MAGIC: usize = 4;
    pub const BODY_CRC: usize = 8;
    pub const QUEUE_ID: usize = 12;
    pub const FLAG: usize = 16;
    pub const QUEUE_OFFSET: usize = 20;
    pub const PHYSICAL_OFFSET: usize = 28;
    pub const SYS_FLAG: usize = 36;
    pub const BORN_TIMESTAMP: usize = 40;
    pub const BORN_HOST: usize = 48;
}

/// Everything about a message that the caller decides; the store fills in the rest
/// (queue offset, physical offset, store timestamp, store host, body CRC).
#[derive(Debug, Clone)]
pub struct MessageMeta<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
}

/// Body CRC as RocketMQ stores it: CRC-32 (zlib) with the top bit cleared.
pub fn body_crc(body: &[u8]) -> i32 {
    if body.is_empty() {
        return 0;
    }
    (crc32fast::hash(body) & 0x7FFF_FFFF) as i32
}

/// IPv4-mapped IPv6 peers (`::ffff:a.b.c.d`) are stored as IPv4: C++ consumers only read IPv4 hosts.
pub fn normalize_host(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

pub fn host_sysflag(born: &SocketAddr, store: &SocketAddr) -> i32 {
    let mut f = 0;
    if born.is_ipv6() {
        f |= sysflag::BORNHOST_V6;
    }
    if store.is_ipv6() {
        f |= sysflag::STOREHOST_V6;
    }
    f
}

/// TOTALSIZE of a record (Java `calMsgLength`).
pub fn record_len(sys_flag: i32, body_len: usize, topic_len: usize, props_len: usize) -> usize {
    let born = if sys_flag & sysflag::BORNHOST_V6 != 0 {
        20
    } else {
        8
    };
    let store = if sys_flag & sysflag::STOREHOST_V6 != 0 {
        20
    } else {
        8
    };
    4 + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + born
        + 8
        + store
        + 4
        + 8
        + 4
        + body_len
        + 1
        + topic_len
        + 2
        + props_len
}

/// Checks the limits RocketMQ enforces before a put.
pub fn validate(
    meta: &MessageMeta,
    body_len: usize,
    props_len: usize,
    max_body: usize,
) -> Result<()> {
    validate_topic(meta.topic)?;
    if body_len > max_body {
        return Err(StoreError::MessageTooLarge {
            size: body_len,
            max: max_body,
        });
    }
    if props_len > MAX_PROPERTIES_LENGTH {
        return Err(StoreError::PropertiesTooLarge(props_len));
    }
    if meta.queue_id < 0 {
        return Err(StoreError::InvalidArgument(format!(
            "queue id {} is negative",
            meta.queue_id
        )));
    }
    Ok(())
}

/// RocketMQ's topic rule: `^[%|a-zA-Z0-9_-]+$`, at most 127 bytes.
pub fn validate_topic(topic: &str) -> Result<()> {
    let bad = |reason| {
        Err(StoreError::InvalidTopic {
            topic: topic.to_string(),
            reason,
        })
    };
    if topic.is_empty() {
        return bad("empty");
    }
    if topic.len() > MAX_TOPIC_LENGTH {
        return bad("longer than 127 bytes");
    }
    if !topic
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
    {
        return bad("only letters, digits, '%', '|', '_' and '-' are allowed");
    }
    Ok(())
}

/// The fields the store assigns at append time.
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
}

fn put_host(out: &mut [u8], at: usize, addr: &SocketAddr) -> usize {
    match addr {
        SocketAddr::V4(a) => {
            out[at..at + 4].copy_from_slice(&a.ip().octets());
            out[at + 4..at + 8].copy_from_slice(&(a.port() as i32).to_be_bytes());
            at + 8
        }
        SocketAddr::V6(a) => {
            out[at..at + 16].copy_from_slice(&a.ip().octets());
            out[at + 16..at + 20].copy_from_slice(&(a.port() as i32).to_be_bytes());
            at + 20
        }
    }
}

/// Writes one record into `out`, which must be exactly `record_len(..)` bytes long.
/// `meta.sys_flag` must already carry the host bits (`host_sysflag`).
pub fn encode_record(
    out: &mut [u8],
    meta: &MessageMeta,
    body: &[u8],
    body_crc: i32,
    props: &[u8],
    place: &Placement,
) {
    let total = out.len();
    debug_assert_eq!(
        total,
        record_len(meta.sys_flag, body.len(), meta.topic.len(), props.len())
    );
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        out[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    put(&(total as i32).to_be_bytes());
    put(&MESSAGE_MAGIC_CODE.to_be_bytes());
    put(&body_crc.to_be_bytes());
    put(&meta.queue_id.to_be_bytes());
    put(&meta.flag.to_be_bytes());
    put(&place.queue_offset.to_be_bytes());
    put(&place.physical_offset.to_be_bytes());
    put(&meta.sys_flag.to_be_bytes());
    put(&meta.born_timestamp.to_be_bytes());
    let mut at = put_host(out, at, &meta.born_host);
    out[at..at + 8].copy_from_slice(&place.store_timestamp.to_be_bytes());
    at = put_host(out, at + 8, &place.store_host);
    let mut put = |bytes: &[u8]| {
        out[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    put(&meta.reconsume_times.to_be_bytes());
    put(&meta.prepared_transaction_offset.to_be_bytes());
    put(&(body.len() as i32).to_be_bytes());
    put(body);
    put(&[meta.topic.len() as u8]);
    put(meta.topic.as_bytes());
    put(&(props.len() as i16).to_be_bytes());
    put(props);
    debug_assert_eq!(at, total);
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

/// What the first 8 bytes at a CommitLog position say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordHead {
    Message(usize),
    /// End-of-file blank: skip to the next file.
    Blank,
    /// Zeros: end of written data.
    End,
    /// Anything else: a torn or corrupt tail.
    Invalid,
}

pub fn record_head(b: &[u8]) -> RecordHead {
    if b.len() < 8 {
        return RecordHead::Invalid;
    }
    let size = be_i32(b, 0);
    let magic = be_i32(b, 4);
    match magic {
        MESSAGE_MAGIC_CODE
            if size as usize >= record_len(0, 0, 0, 0) && size as usize <= b.len() =>
        {
            RecordHead::Message(size as usize)
        }
        BLANK_MAGIC_CODE => RecordHead::Blank,
        0 if size == 0 => RecordHead::End,
        _ => RecordHead::Invalid,
    }
}

/// A decoded view over one stored record; borrows the bytes, copies nothing.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    pub bytes: &'a [u8],
    pub body_crc: i32,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: &'a [u8],
    pub topic: &'a str,
    pub properties: &'a str,
}

fn read_host(b: &[u8], at: usize, v6: bool) -> (SocketAddr, usize) {
    if v6 {
        let ip: [u8; 16] = b[at..at + 16].try_into().unwrap();
        let port = be_i32(b, at + 16) as u16;
        (SocketAddr::new(IpAddr::from(ip), port), at + 20)
    } else {
        let ip: [u8; 4] = b[at..at + 4].try_into().unwrap();
        let port = be_i32(b, at + 4) as u16;
        (
            SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port),
            at + 8,
        )
    }
}

fn corrupt(reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        path: Default::default(),
        reason: reason.into(),
    }
}

impl<'a> RecordView<'a> {
    /// Decodes the record at the start of `b`, checking every length against the buffer.
    /// With `check_crc` the body CRC is verified too (recovery, untrusted input).
    pub fn parse(b: &'a [u8], check_crc: bool) -> Result<Self> {
        let size = match record_head(b) {
            RecordHead::Message(size) => size,
            other => return Err(corrupt(format!("no message record here ({other:?})"))),
        };
        let b = &b[..size];
        let sys_flag = be_i32(b, pos::SYS_FLAG);
        let fixed = record_len(sys_flag, 0, 0, 0);
        if size < fixed {
            return Err(corrupt(format!(
                "record of {size} bytes is shorter than its header"
            )));
        }
        let (born_host, at) = read_host(b, pos::BORN_HOST, sys_flag & sysflag::BORNHOST_V6 != 0);
        let store_timestamp = be_i64(b, at);
        let (store_host, at) = read_host(b, at + 8, sys_flag & sysflag::STOREHOST_V6 != 0);
        let reconsume_times = be_i32(b, at);
        let prepared_transaction_offset = be_i64(b, at + 4);
        let body_len = be_i32(b, at + 12);
        let body_at = at + 16;
        if body_len < 0 || body_at + body_len as usize + 3 > size {
            return Err(corrupt(format!(
                "body length {body_len} overruns record of {size} bytes"
            )));
        }
        let body = &b[body_at..body_at + body_len as usize];
        let topic_at = body_at + body.len();
        let topic_len = b[topic_at] as usize;
        if topic_at + 1 + topic_len + 2 > size {
            return Err(corrupt("topic length overruns record"));
        }
        let topic = std::str::from_utf8(&b[topic_at + 1..topic_at + 1 + topic_len])
            .map_err(|_| corrupt("topic is not UTF-8"))?;
        let props_at = topic_at + 1 + topic_len;
        let props_len = u16::from_be_bytes([b[props_at], b[props_at + 1]]) as usize;
        if props_at + 2 + props_len != size {
            return Err(corrupt(format!(
                "record fields add up to {} bytes, TOTALSIZE says {size}",
                props_at + 2 + props_len
            )));
        }
        let properties = std::str::from_utf8(&b[props_at + 2..size])
            .map_err(|_| corrupt("properties are not UTF-8"))?;
        let stored_crc = be_i32(b, pos::BODY_CRC);
        if check_crc && body_crc(body) != stored_crc {
            return Err(corrupt("body CRC mismatch"));
        }
        Ok(RecordView {
            bytes: b,
            body_crc: stored_crc,
            queue_id: be_i32(b, pos::QUEUE_ID),
            flag: be_i32(b, pos::FLAG),
            queue_offset: be_i64(b, pos::QUEUE_OFFSET),
            physical_offset: be_i64(b, pos::PHYSICAL_OFFSET),
            sys_flag,
            born_timestamp: be_i64(b, pos::BORN_TIMESTAMP),
            born_host,
            store_timestamp,
            store_host,
            reconsume_times,
            prepared_transaction_offset,
            body,
            topic,
            properties,
        })
    }

    pub fn total_size(&self) -> usize {
        self.bytes.len()
    }

    pub fn property(&self, name: &str) -> Option<&'a str> {
        get_property(self.properties, name)
    }

    /// The broker-generated message id (offsetMsgId) of this record.
    pub fn offset_msg_id(&self) -> String {
        offset_msg_id(&self.store_host, self.physical_offset)
    }
}

/// Finds one property in a `name\x01value\x02...` string without allocating.
/// Follows Java's decoder: entries with an empty name or value do not count, and of a repeated
/// name the last value counts.
pub fn get_property<'a>(props: &'a str, name: &str) -> Option<&'a str> {
    props.rsplit(PROPERTY_SEPARATOR).find_map(|entry| {
        let (k, v) = entry.split_once(NAME_VALUE_SEPARATOR)?;
        (k == name && !v.is_empty()).then_some(v)
    })
}

/// The properties dispatch looks at, found in one pass over the string.
#[derive(Debug, Default, Clone, Copy)]
pub struct DispatchProperties<'a> {
    pub tags: Option<&'a str>,
    pub keys: Option<&'a str>,
    pub uniq_key: Option<&'a str>,
    pub delay: Option<&'a str>,
    /// INNER_MULTI_DISPATCH and INNER_MULTI_QUEUE_OFFSET (the light message queues').
    pub multi_dispatch: Option<&'a str>,
    pub multi_queue_offset: Option<&'a str>,
}

impl<'a> DispatchProperties<'a> {
    pub fn parse(props: &'a str) -> Self {
        let mut out = DispatchProperties::default();
        for entry in props.split(PROPERTY_SEPARATOR) {
            let Some((k, v)) = entry.split_once(NAME_VALUE_SEPARATOR) else {
                continue;
            };
            if v.is_empty() {
                continue;
            }
            let slot = match k {
                property::TAGS => &mut out.tags,
                property::KEYS => &mut out.keys,
                property::UNIQ_KEY => &mut out.uniq_key,
                property::DELAY => &mut out.delay,
                property::INNER_MULTI_DISPATCH => &mut out.multi_dispatch,
                property::INNER_MULTI_QUEUE_OFFSET => &mut out.multi_queue_offset,
                _ => continue,
            };
            // The last value of a repeated name counts, as in Java's map.
            *slot = Some(v);
        }
        out
    }

    /// How many index entries the record makes (see [`index_tokens`]).
    pub fn key_count(&self) -> usize {
        index_tokens(self.uniq_key, self.keys).count()
    }
}

/// The index keys of a record, without the `topic#` prefix: UNIQ_KEY, then each
/// space-separated KEYS token.
pub fn index_tokens<'a>(
    uniq_key: Option<&'a str>,
    keys: Option<&'a str>,
) -> impl Iterator<Item = &'a str> {
    uniq_key
        .into_iter()
        .chain(keys.into_iter().flat_map(|k| k.split(' ')))
        .filter(|k| !k.is_empty())
}

/// The properties as Java's decoder reads them into its map: entries without a name or a value
/// are dropped, and a repeated name keeps its first position and takes its last value.
pub fn parse_properties(props: &str) -> Vec<(&str, &str)> {
    let mut spans = PropertySpans::default();
    spans.parse(props);
    spans.pairs(props).collect()
}

/// [`parse_properties`] as spans of the properties string, found in one pass, in a vector a
/// caller decoding many records reuses from record to record.
#[derive(Debug, Default)]
pub struct PropertySpans {
    entries: Vec<(Range<usize>, Range<usize>)>,
}

impl PropertySpans {
    /// Reads `props`, forgetting the record read before.
    pub fn parse(&mut self, props: &str) {
        self.entries.clear();
        let bytes = props.as_bytes();
        let mut start = 0;
        while start < bytes.len() {
            let end = memchr::memchr(PROPERTY_SEPARATOR as u8, &bytes[start..])
                .map_or(bytes.len(), |i| start + i);
            if let Some(eq) = memchr::memchr(NAME_VALUE_SEPARATOR as u8, &bytes[start..end]) {
                let (name, value) = (start..start + eq, start + eq + 1..end);
                if !name.is_empty() && !value.is_empty() {
                    let known = self
                        .entries
                        .iter_mut()
                        .find(|(n, _)| bytes[n.clone()] == bytes[name.clone()]);
                    match known {
                        Some(entry) => entry.1 = value,
                        None => self.entries.push((name, value)),
                    }
                }
            }
            start = end + 1;
        }
    }

    /// The (name, value) entries of `props`, the string last parsed, in their order.
    pub fn pairs<'s, 'p: 's>(
        &'s self,
        props: &'p str,
    ) -> impl Iterator<Item = (&'p str, &'p str)> + 's {
        self.entries
            .iter()
            .map(move |(k, v)| (&props[k.clone()], &props[v.clone()]))
    }

    /// The value of `name` in `props`, the string last parsed.
    pub fn get<'a>(&self, props: &'a str, name: &str) -> Option<&'a str> {
        self.entries
            .iter()
            .find(|(n, _)| &props[n.clone()] == name)
            .map(|(_, v)| &props[v.clone()])
    }
}

/// Serializes properties the way Java does (no trailing separator).
pub fn encode_properties<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::new();
    append_properties(&mut out, pairs);
    out
}

/// Appends entries to a serialized properties string.
pub fn append_properties<'a>(
    out: &mut String,
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) {
    for (k, v) in pairs {
        if !out.is_empty() {
            out.push(PROPERTY_SEPARATOR);
        }
        out.push_str(k);
        out.push(NAME_VALUE_SEPARATOR);
        out.push_str(v);
    }
}

/// Appends properties as a client writes them (Java's `messageProperties2String`, without its
/// trailing separator): in order, an entry with an empty name or no value left out, an empty
/// value kept. A name or value holding a separator is refused with the property's name (Java
/// would write it, and the entries read back would not be those written); `out` may then hold
/// the entries before it.
pub fn append_client_properties<'a>(
    out: &mut Vec<u8>,
    pairs: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> std::result::Result<(), &'a str> {
    let mut first = true;
    for (name, value) in pairs {
        let Some(value) = value else { continue };
        if name.is_empty() {
            continue;
        }
        if [name, value]
            .iter()
            .any(|s| s.contains([NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR]))
        {
            return Err(name);
        }
        if !first {
            out.push(PROPERTY_SEPARATOR as u8);
        }
        first = false;
        out.extend_from_slice(name.as_bytes());
        out.push(NAME_VALUE_SEPARATOR as u8);
        out.extend_from_slice(value.as_bytes());
    }
    Ok(())
}

/// A batch message's stored properties: its own, then the batch's (after a separator unless
/// its own are empty or already end with one), as Java's batch encoder joins them.
pub fn join_properties<'a>(inner: &'a str, outer: &str) -> Cow<'a, str> {
    if outer.is_empty() {
        Cow::Borrowed(inner)
    } else if inner.is_empty() || inner.ends_with(PROPERTY_SEPARATOR) {
        Cow::Owned(format!("{inner}{outer}"))
    } else {
        Cow::Owned(format!("{inner}{PROPERTY_SEPARATOR}{outer}"))
    }
}

/// Whether `s` can be a property name or value: non-empty, without a separator.
pub fn is_property_token(s: &str) -> bool {
    !s.is_empty() && !s.contains([NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR])
}

/// offsetMsgId: store host address and port (int) and physical offset, in upper-case hex.
pub fn offset_msg_id(store_host: &SocketAddr, physical_offset: i64) -> String {
    let mut out = Vec::with_capacity(56);
    push_offset_msg_id(&mut out, store_host, physical_offset);
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// [`offset_msg_id`] appended to `out` (a column's bytes), without a String of its own.
pub fn push_offset_msg_id(out: &mut Vec<u8>, store_host: &SocketAddr, physical_offset: i64) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut raw = [0u8; 28];
    let ip_len = match store_host {
        SocketAddr::V4(a) => {
            raw[..4].copy_from_slice(&a.ip().octets());
            4
        }
        SocketAddr::V6(a) => {
            raw[..16].copy_from_slice(&a.ip().octets());
            16
        }
    };
    raw[ip_len..ip_len + 4].copy_from_slice(&(store_host.port() as i32).to_be_bytes());
    raw[ip_len + 4..ip_len + 12].copy_from_slice(&physical_offset.to_be_bytes());
    for b in &raw[..ip_len + 12] {
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 0xF) as usize]);
    }
}

/// Decodes an offsetMsgId into (store host, physical offset).
pub fn decode_offset_msg_id(id: &str) -> Result<(SocketAddr, i64)> {
    let bad = || StoreError::InvalidArgument(format!("not an offsetMsgId: {id:?}"));
    if (id.len() != 32 && id.len() != 56) || !id.is_ascii() {
        return Err(bad());
    }
    let bytes: Vec<u8> = (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&id[i..i + 2], 16))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| bad())?;
    let ip_len = if bytes.len() == 16 { 4 } else { 16 };
    let ip = if ip_len == 4 {
        IpAddr::from(<[u8; 4]>::try_from(&bytes[..4]).unwrap())
    } else {
        IpAddr::from(<[u8; 16]>::try_from(&bytes[..16]).unwrap())
    };
    let port = be_i32(&bytes, ip_len) as u16;
    let offset = be_i64(&bytes, ip_len + 4);
    Ok((SocketAddr::new(ip, port), offset))
}

/// Iterates over the records packed in a buffer (a pull or query body).
pub fn iter_records(buf: &[u8], check_crc: bool) -> impl Iterator<Item = Result<RecordView<'_>>> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at >= buf.len() {
            return None;
        }
        match RecordView::parse(&buf[at..], check_crc) {
            Ok(view) => {
                at += view.total_size();
                Some(Ok(view))
            }
            Err(e) => {
                at = buf.len();
                Some(Err(e))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    const GOLDEN: &str = "0000007A DAA320A7 77D18982 00000001 00000000 0000000000000007 00000000000004D2 00000000
        00000174876E8000 C0A80002 0000D431 00000174876E807B 7F000001 00002A9F 00000000 0000000000000000
        00000005 48656C6C6F 09 546F70696354657374 0011 544147530154616741024B455953016B31";

    #[test]
    fn encodes_the_facts_sheet_record() {
        let meta = MessageMeta {
            topic: "TopicTest",
            queue_id: 1,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1_600_000_000_000,
            born_host: "192.168.0.2:54321".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        };
        let props = "TAGS\u{1}TagA\u{2}KEYS\u{1}k1";
        let place = Placement {
            queue_offset: 7,
            physical_offset: 1234,
            store_timestamp: 1_600_000_000_123,
            store_host: "127.0.0.1:10911".parse().unwrap(),
        };
        let len = record_len(0, 5, 9, props.len());
        assert_eq!(len, 122);
        let mut out = vec![0u8; len];
        encode_record(
            &mut out,
            &meta,
            b"Hello",
            body_crc(b"Hello"),
            props.as_bytes(),
            &place,
        );
        assert_eq!(out, hex(GOLDEN));
    }

    #[test]
    fn decodes_the_facts_sheet_record() {
        let bytes = hex(GOLDEN);
        let v = RecordView::parse(&bytes, true).unwrap();
        assert_eq!(v.topic, "TopicTest");
        assert_eq!(v.body, b"Hello");
        assert_eq!(v.queue_id, 1);
        assert_eq!(v.queue_offset, 7);
        assert_eq!(v.physical_offset, 1234);
        assert_eq!(v.born_host.to_string(), "192.168.0.2:54321");
        assert_eq!(v.store_timestamp, 1_600_000_000_123);
        assert_eq!(v.property("TAGS"), Some("TagA"));
        assert_eq!(v.property("KEYS"), Some("k1"));
        assert_eq!(v.offset_msg_id(), "7F00000100002A9F00000000000004D2");
    }

    #[test]
    fn crc_golden_values() {
        assert_eq!(body_crc(b"123456789"), 1274296614);
        assert_eq!(body_crc(b"Hello") as u32, 0x77D18982);
        assert_eq!(body_crc(b""), 0);
    }

    #[test]
    fn rejects_truncated_and_corrupt_records() {
        let bytes = hex(GOLDEN);
        for cut in [0, 7, 8, 60, 121] {
            assert!(
                RecordView::parse(&bytes[..cut], false).is_err(),
                "cut at {cut}"
            );
        }
        let mut bad = bytes.clone();
        bad[90] ^= 0xFF; // inside the body
        assert!(RecordView::parse(&bad, true).is_err());
        assert!(RecordView::parse(&bad, false).is_ok());
        let mut bad_len = bytes.clone();
        bad_len[87] = 200; // body length overruns
        assert!(RecordView::parse(&bad_len, false).is_err());
    }

    #[test]
    fn property_spans_agree_with_dispatch_and_javas_map() {
        let cases: [(&str, &[(&str, &str)]); 5] = [
            ("", &[]),
            (
                "TAGS\u{1}a\u{2}KEYS\u{1}k1 k2\u{2}UNIQ_KEY\u{1}U",
                &[("TAGS", "a"), ("KEYS", "k1 k2"), ("UNIQ_KEY", "U")],
            ),
            // Repeated names keep their first position and take their last value.
            (
                "TAGS\u{1}a\u{2}KEYS\u{1}k\u{2}TAGS\u{1}b\u{2}",
                &[("TAGS", "b"), ("KEYS", "k")],
            ),
            // Entries without a name, a value or a separator are dropped.
            (
                "\u{1}x\u{2}TAGS\u{1}\u{2}junk\u{2}\u{2}KEYS\u{1}k\u{2}",
                &[("KEYS", "k")],
            ),
            ("TAGS\u{1}a\u{1}b", &[("TAGS", "a\u{1}b")]),
        ];
        let mut spans = PropertySpans::default();
        for (props, want) in cases {
            spans.parse(props);
            assert_eq!(spans.pairs(props).collect::<Vec<_>>(), want, "{props:?}");
            let dispatch = DispatchProperties::parse(props);
            assert_eq!(spans.get(props, property::TAGS), dispatch.tags, "{props:?}");
            assert_eq!(spans.get(props, property::KEYS), dispatch.keys, "{props:?}");
            assert_eq!(spans.get(props, property::UNIQ_KEY), dispatch.uniq_key);
        }
    }

    #[test]
    fn properties_follow_java_rules() {
        let p = "A\u{1}1\u{2}\u{1}x\u{2}B\u{1}\u{2}C\u{1}3\u{2}A\u{1}4";
        assert_eq!(parse_properties(p), vec![("A", "4"), ("C", "3")]);
        assert_eq!(get_property(p, "B"), None);
        assert_eq!(get_property(p, "C"), Some("3"));
        assert_eq!(
            encode_properties([("A", "1"), ("C", "3")]),
            "A\u{1}1\u{2}C\u{1}3"
        );
    }

    #[test]
    fn batch_properties_join() {
        let join = |a, b| join_properties(a, b).into_owned();
        assert_eq!(join("A\u{1}1", "C\u{1}x"), "A\u{1}1\u{2}C\u{1}x");
        assert_eq!(join("A\u{1}1\u{2}", "C\u{1}x"), "A\u{1}1\u{2}C\u{1}x");
        assert_eq!(join("", "C\u{1}x"), "C\u{1}x");
        assert_eq!(join("A\u{1}1", ""), "A\u{1}1");
        assert!(is_property_token("a b") && !is_property_token("") && !is_property_token("a\u{2}"));
    }

    #[test]
    fn a_client_writes_properties_in_order_leaving_out_unnamed_and_unset_ones() {
        let write = |pairs: &[(&'static str, Option<&'static str>)]| {
            let mut out = Vec::new();
            append_client_properties(&mut out, pairs.iter().copied())
                .map(|()| String::from_utf8(out).unwrap())
        };
        let s = write(&[
            ("A", Some("1")),
            ("", Some("x")),
            ("B", None),
            ("E", Some("")),
        ]);
        assert_eq!(s.as_deref(), Ok("A\u{1}1\u{2}E\u{1}"));
        assert_eq!(write(&[]).as_deref(), Ok(""));
        assert_eq!(write(&[("A", Some("1")), ("T", Some("a\u{2}b"))]), Err("T"));
        assert_eq!(write(&[("K\u{1}", Some("v"))]), Err("K\u{1}"));
        // What it writes reads back as written.
        let s = write(&[("é", Some("ü b")), ("N", Some("1"))]).unwrap();
        assert_eq!(parse_properties(&s), vec![("é", "ü b"), ("N", "1")]);
    }

    #[test]
    fn msg_id_round_trip() {
        let host: SocketAddr = "127.0.0.1:10911".parse().unwrap();
        let id = offset_msg_id(&host, 1234);
        assert_eq!(id, "7F00000100002A9F00000000000004D2");
        assert_eq!(decode_offset_msg_id(&id).unwrap(), (host, 1234));
        let v6: SocketAddr = "[::1]:10911".parse().unwrap();
        let id6 = offset_msg_id(&v6, 99);
        assert_eq!(id6.len(), 56);
        assert_eq!(decode_offset_msg_id(&id6).unwrap(), (v6, 99));
        assert!(decode_offset_msg_id("zz").is_err());
        assert!(decode_offset_msg_id("ZZ00000100002A9F00000000000004D2").is_err());
    }

    #[test]
    fn mapped_ipv6_hosts_become_ipv4() {
        let a: SocketAddr = "[::ffff:10.0.0.1]:5".parse().unwrap();
        assert_eq!(normalize_host(a).to_string(), "10.0.0.1:5");
    }

    #[test]
    fn topic_rules() {
        assert!(validate_topic("Topic_A-1%|x").is_ok());
        assert!(validate_topic("").is_err());
        assert!(validate_topic("a b").is_err());
        assert!(validate_topic(&"t".repeat(128)).is_err());
        assert!(validate_topic(&"t".repeat(127)).is_ok());
    }
}
