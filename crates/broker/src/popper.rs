//! The rules of POP consumption (RocketMQ 5.x's PopMessageProcessor, AckMessageProcessor and
//! ChangeInvisibleTimeProcessor), in one place: the plane's pops and acks and Python's (through
//! the binding) run this code.
//!
//! A pop takes messages from a group's queues (and its pop retry topic), moves the group's offset
//! past them at once, and writes a checkpoint (`ck`) into the revive topic as a timer message due
//! when the messages become visible again. An ack writes an `ack` message due at the same time.
//! Python's revive service reads the revive queues and puts back what no ack took. An orderly
//! pop writes no checkpoint: its offset moves with the acks, which Python keeps (it knows which
//! queues are blocked and keeps their order information).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use ferromq_store::message::{self, property, MessageMeta, RecordView};
use ferromq_store::{GetResult, GetStatus, MessageStore, PutResult, StoreError};
use serde::Serialize;

use crate::offsets::ConsumerOffsets;
use crate::tags::TagFilter;
use ferromq_remoting::codes::{
    INVALID_PARAMETER, MESSAGE_ILLEGAL, RETRY_PREFIX, SERVICE_NOT_AVAILABLE,
};

pub const REVIVE_TOPIC_PREFIX: &str = "rmq_sys_REVIVE_LOG_";
/// The revive queue id an orderly pop answers (it writes no checkpoint).
pub const ORDER_REVIVE_QUEUE: i32 = 999;
pub const CK_TAG: &str = "ck";
pub const ACK_TAG: &str = "ack";
pub const BATCH_ACK_TAG: &str = "bAck";
pub const PROPERTY_POP_CK: &str = "POP_CK";
/// A checkpoint is due this long before its messages are visible again, so the acks (due at
/// that time) come after it in the revive queue (PopAckConstants.ackTimeInterval).
pub const ACK_TIME_INTERVAL_MS: i64 = 1000;
pub const MAX_POP_NUMS: usize = 32;
/// The longest invisible time a pop or a change of invisible time may ask for (7 days). Java's
/// broker takes any number and wraps `popTime + invisibleTime`; a bound where the request is
/// read keeps every revive time a plain sum (the 5.x proxy's own bound, 12 hours, is lower).
pub const MAX_INVISIBLE_TIME_MS: i64 = 7 * 24 * 3600 * 1000;
/// Share (in %) of pops that read the retry topic first (popFromRetryProbability).
const POP_FROM_RETRY_PROBABILITY: u32 = 20;
/// A pop reads at most this many bytes of one queue (the count bounds it first).
const POP_READ_MAX_BYTES: usize = 1 << 30;

pub const TOPIC_NOT_EXIST: i32 = 17;
pub const NO_MESSAGE: i32 = 208;

/// A refusal with Java's response code and remark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopError {
    pub code: i32,
    pub remark: String,
}

impl From<StoreError> for PopError {
    fn from(e: StoreError) -> PopError {
        PopError {
            code: ferromq_remoting::codes::of_store_error(&e),
            remark: e.to_string(),
        }
    }
}

fn refuse(code: i32, remark: String) -> PopError {
    PopError { code, remark }
}

/// A pop's or a change's invisible time: from 0 to MAX_INVISIBLE_TIME_MS.
pub fn check_invisible_time(invisible_time: i64) -> Result<(), PopError> {
    if (0..=MAX_INVISIBLE_TIME_MS).contains(&invisible_time) {
        return Ok(());
    }
    Err(refuse(
        INVALID_PARAMETER,
        format!("invisibleTime {invisible_time} is illegal: it must be from 0 to {MAX_INVISIBLE_TIME_MS} ms"),
    ))
}

/// What the pop rules need of the broker; fixed while they serve (made anew when it changes).
#[derive(Debug, Clone)]
pub struct PopSettings {
    pub broker_name: String,
    pub cluster: String,
    /// reviveQueueNum.
    pub revive_queues: i32,
    /// enableRetryTopicV2: `%RETRY%<group>+<topic>` instead of `%RETRY%<group>_<topic>`.
    pub retry_v2: bool,
    /// The born host of the revive topic's messages (this broker).
    pub broker_addr: SocketAddr,
}

/// The topic names the broker has, with their read queue counts.
pub trait Topics {
    fn read_queues(&self, topic: &str) -> Option<i32>;
}

impl<F: Fn(&str) -> Option<i32>> Topics for F {
    fn read_queues(&self, topic: &str) -> Option<i32> {
        self(topic)
    }
}

pub fn revive_topic(cluster: &str) -> String {
    format!("{REVIVE_TOPIC_PREFIX}{cluster}")
}

/// The retry topic of `group` popping `topic` (KeyBuilder.buildPopRetryTopic).
pub fn retry_topic(topic: &str, group: &str, v2: bool) -> String {
    let sep = if v2 { '+' } else { '_' };
    format!("{RETRY_PREFIX}{group}{sep}{topic}")
}

/// The topics a pop of `topic` by `group` reads: the topic and its retry topics (both names).
/// A message stored in one of them may be what a waiting pop takes.
pub fn pop_topics(topic: &str, group: &str) -> Vec<String> {
    vec![
        topic.to_string(),
        retry_topic(topic, group, false),
        retry_topic(topic, group, true),
    ]
}

/// The kind of topic a receipt names: "0" normal, "1" v1 retry, "2" v2 retry.
pub fn retry_mark(topic: &str) -> &'static str {
    match topic.strip_prefix(RETRY_PREFIX) {
        None => "0",
        Some(rest) if rest.contains('+') => "2",
        Some(_) => "1",
    }
}

/// The topic a receipt's message lies in (the retry topic for marks 1 and 2).
pub fn real_topic(topic: &str, group: &str, mark: &str) -> String {
    match mark {
        "1" => retry_topic(topic, group, false),
        "2" => retry_topic(topic, group, true),
        _ => topic.to_string(),
    }
}

/// A popped message's receipt (`POP_CK`, an ack's `extraInfo`): eight fields separated by
/// spaces (ExtraInfoUtil).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraInfo {
    pub ck_offset: i64,
    pub pop_time: i64,
    pub invisible_time: i64,
    pub revive_qid: i32,
    pub mark: String,
    pub broker_name: String,
    pub queue_id: i32,
    pub offset: i64,
}

impl ExtraInfo {
    pub fn parse(text: &str) -> Option<ExtraInfo> {
        let f: Vec<&str> = text.split(' ').collect();
        if f.len() < 7 {
            return None;
        }
        let ck_offset = f[0].parse().ok()?;
        Some(ExtraInfo {
            ck_offset,
            pop_time: f[1].parse().ok()?,
            invisible_time: f[2].parse().ok()?,
            revive_qid: f[3].parse().ok()?,
            mark: f[4].to_string(),
            broker_name: f[5].to_string(),
            queue_id: f[6].parse().ok()?,
            offset: match f.get(7) {
                Some(o) => o.parse().ok()?,
                None => ck_offset,
            },
        })
    }

    pub fn orderly(&self) -> bool {
        self.revive_qid == ORDER_REVIVE_QUEUE
    }

    /// Whether its message is visible again (`ReceiptHandle.isExpired`): the 5.x proxy refuses
    /// to ack it or change its invisible time then.
    pub fn expired(&self, now_ms: i64) -> bool {
        self.pop_time.saturating_add(self.invisible_time) <= now_ms
    }
}

impl std::fmt::Display for ExtraInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {} {} {}",
            self.ck_offset,
            self.pop_time,
            self.invisible_time,
            self.revive_qid,
            self.mark,
            self.broker_name,
            self.queue_id,
            self.offset
        )
    }
}

/// The UNIQ_KEY of a checkpoint (its start offset, tag `ck`) or an ack (the acked offset).
fn uniq_key(
    topic: &str,
    queue_id: i32,
    offset: i64,
    group: &str,
    pop_time: i64,
    broker_name: &str,
    tag: &str,
) -> String {
    format!("{topic}@{queue_id}@{offset}@{group}@{pop_time}@{broker_name}@{tag}")
}

/// `PopCheckPoint` as Java's fastjson writes it (short names, in alphabetical order: serde
/// writes fields in declaration order).
#[derive(Serialize)]
struct CheckPointJson<'a> {
    bm: i64,
    bn: &'a str,
    c: &'a str,
    d: &'a [i64],
    it: i64,
    n: usize,
    pt: i64,
    q: i32,
    #[serde(rename = "reviveTime")]
    revive_time: i64,
    ro: i64,
    so: i64,
    t: &'a str,
}

/// `AckMsg` (tag `ack`).
#[derive(Serialize)]
struct AckJson<'a> {
    ao: i64,
    bn: &'a str,
    c: &'a str,
    pt: i64,
    q: i32,
    so: i64,
    t: &'a str,
}

impl<'a> CheckPointJson<'a> {
    /// The checkpoint of the messages at `diffs` past `start_offset` that a pop took at
    /// `pop_time` for `invisible_time` ms: none acked yet, due (saturating) when they are visible
    /// again.
    #[allow(clippy::too_many_arguments)]
    fn new(
        topic: &'a str,
        group: &'a str,
        queue_id: i32,
        start_offset: i64,
        diffs: &'a [i64],
        pop_time: i64,
        invisible_time: i64,
        broker_name: &'a str,
    ) -> Self {
        CheckPointJson {
            bm: 0,
            bn: broker_name,
            c: group,
            d: diffs,
            it: invisible_time,
            n: diffs.len(),
            pt: pop_time,
            q: queue_id,
            revive_time: pop_time.saturating_add(invisible_time),
            ro: 0,
            so: start_offset,
            t: topic,
        }
    }

    /// Its `ck` message: the body and the UNIQ_KEY.
    fn message(&self) -> (Vec<u8>, String) {
        let key = uniq_key(self.t, self.q, self.so, self.c, self.pt, self.bn, CK_TAG);
        (
            serde_json::to_vec(self).expect("plain fields serialize"),
            key,
        )
    }
}

/// The `ck` message (body, UNIQ_KEY) the rules write for a pop of the messages at `diffs` past
/// `start_offset`. Python's `CheckPoint` (`broker/pop/formats.py`, which its revive service
/// reads and rewrites) is checked against it through the binding (`_store.pop_checkpoint`).
#[allow(clippy::too_many_arguments)]
pub fn checkpoint_message(
    topic: &str,
    group: &str,
    queue_id: i32,
    start_offset: i64,
    diffs: &[i64],
    pop_time: i64,
    invisible_time: i64,
    broker_name: &str,
) -> (Vec<u8>, String) {
    CheckPointJson::new(
        topic,
        group,
        queue_id,
        start_offset,
        diffs,
        pop_time,
        invisible_time,
        broker_name,
    )
    .message()
}

/// The `ack` message (body, UNIQ_KEY) the rules write for an ack of `ack_offset`, whose receipt
/// names `start_offset` and `pop_time`; Python's `AckMsg` is checked against it
/// (`_store.pop_ack`).
pub fn ack_message(
    topic: &str,
    group: &str,
    queue_id: i32,
    ack_offset: i64,
    start_offset: i64,
    pop_time: i64,
    broker_name: &str,
) -> (Vec<u8>, String) {
    let ack = AckJson {
        ao: ack_offset,
        bn: broker_name,
        c: group,
        pt: pop_time,
        q: queue_id,
        so: start_offset,
        t: topic,
    };
    let key = uniq_key(
        topic,
        queue_id,
        ack_offset,
        group,
        pop_time,
        broker_name,
        ACK_TAG,
    );
    (
        serde_json::to_vec(&ack).expect("plain fields serialize"),
        key,
    )
}

/// A pop: whose, from where, how many, and what it takes.
pub struct PopRequest<'a> {
    pub group: &'a str,
    pub topic: &'a str,
    /// -1: every read queue of the topic.
    pub queue_id: i32,
    pub max_msgs: usize,
    pub invisible_time: i64,
    /// 0: a group's first pop starts at the queue's first message; 1 (MAX): at its last.
    pub init_mode: i32,
    pub filter: &'a TagFilter,
    /// An orderly (FIFO) pop: no checkpoint, the offset stays until the acks move it.
    pub order: bool,
    /// Queues of an orderly pop whose last pop is neither acked nor visible again.
    pub blocked: &'a [i32],
    /// On a PRIORITY topic (RocketMQ 5.4): the group's `priority.factor` (0-100), the share of
    /// its pops that read the queues from the highest priority down. None on any other topic.
    pub priority_factor: Option<u32>,
}

/// An SQL92 filter's decision on a record of the pop's topic.
pub type Keep<'a> = &'a mut dyn FnMut(&[u8]) -> bool;

/// A popped message an ack or a change of invisible time names, with its receipt.
pub struct Receipted<'a> {
    pub group: &'a str,
    /// Where the message lies (a retry topic for receipts of marks 1 and 2).
    pub topic: &'a str,
    pub queue_id: i32,
    pub offset: i64,
    pub receipt: ExtraInfo,
}

/// One queue a pop took messages from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Take {
    pub topic: String,
    pub queue_id: i32,
    pub start_offset: i64,
    pub queue_offsets: Vec<i64>,
}

/// What a pop answers: the records (a pull body) and the reply's header fields.
#[derive(Debug, Default)]
pub struct Popped {
    pub pop_time: i64,
    pub invisible_time: i64,
    pub revive_qid: i32,
    pub body: Vec<u8>,
    pub count: usize,
    /// Messages left in the queues read.
    pub rest: i64,
    pub takes: Vec<Take>,
}

impl Popped {
    /// `startOffsetInfo`: `<mark> <queueId> <offset>` per queue taken, joined by `;`.
    pub fn start_offset_info(&self) -> String {
        let parts: Vec<String> = self
            .takes
            .iter()
            .map(|t| format!("{} {} {}", retry_mark(&t.topic), t.queue_id, t.start_offset))
            .collect();
        parts.join(";")
    }

    /// `msgOffsetInfo`: `<mark> <queueId> <offset>,<offset>...` per queue taken.
    pub fn msg_offset_info(&self) -> String {
        let parts: Vec<String> = self
            .takes
            .iter()
            .map(|t| {
                let offsets: Vec<String> = t.queue_offsets.iter().map(i64::to_string).collect();
                format!(
                    "{} {} {}",
                    retry_mark(&t.topic),
                    t.queue_id,
                    offsets.join(",")
                )
            })
            .collect();
        parts.join(";")
    }
}

/// What tiered storage answers for a read below a queue's local min offset.
pub enum ColdRead {
    /// The bucket holds none of it: the local answer stands (the offset moves to the local min).
    NotThere,
    /// The bucket could not be read now: nothing is read and the offset stays, for a later pop.
    Unavailable,
    /// Records the bucket holds (status Found, or NoMatchedMessage when the filter took none).
    Found(GetResult),
}

/// Tiered storage under the pops (RocketMQ's TieredMessageStore behind PopMessageProcessor):
/// messages local retention deleted, read from a bucket. Its reads block on the network (a
/// cache first): they happen only for offsets below a queue's local min.
pub trait ColdReader: Send + Sync {
    /// The queue's first offset in the bucket, if it has any there.
    fn min_offset(&self, topic: &str, queue_id: i32) -> Option<i64>;
    /// Up to `max_count` records of the queue from `offset`, `tag_codes` as the store's reads.
    fn read(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        tag_codes: Option<&[i32]>,
    ) -> ColdRead;
}

pub struct Popper {
    store: Arc<MessageStore>,
    cold: RwLock<Option<Arc<dyn ColdReader>>>,
    offsets: Arc<ConsumerOffsets>,
    settings: PopSettings,
    revive_topic: String,
    ck_counter: AtomicU64,
    /// The queues a pop is reading now (`topic@group@queue`): a second pop of one skips it, so
    /// two pops never take the same messages (Java's QueueLockManager).
    popping: Mutex<HashSet<String>>,
}

/// A queue a pop reads, until it is dropped.
struct QueueLock<'a> {
    popping: &'a Mutex<HashSet<String>>,
    key: String,
}

impl<'a> QueueLock<'a> {
    fn try_take(popping: &'a Mutex<HashSet<String>>, key: String) -> Option<QueueLock<'a>> {
        // Not `then_some`: it would make (and drop, unlocking another pop's queue) a lock for a
        // queue taken already, while the guard is held.
        let taken = popping.lock().unwrap().insert(key.clone());
        if taken {
            Some(QueueLock { popping, key })
        } else {
            None
        }
    }
}

impl Drop for QueueLock<'_> {
    fn drop(&mut self) {
        self.popping.lock().unwrap().remove(&self.key);
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Statuses after which a pop moves the offset to where the store says the queue goes on.
fn moved(status: GetStatus) -> bool {
    matches!(
        status,
        GetStatus::OffsetTooSmall | GetStatus::OffsetOverflowBadly | GetStatus::OffsetFoundNull
    )
}

/// Statuses of a read that found nothing the filter takes, though the queue went on.
fn skipped(status: GetStatus) -> bool {
    matches!(
        status,
        GetStatus::NoMatchedMessage
            | GetStatus::OffsetFoundNull
            | GetStatus::MessageWasRemoving
            | GetStatus::NoMatchedLogicQueue
    )
}

impl Popper {
    pub fn new(
        store: Arc<MessageStore>,
        offsets: Arc<ConsumerOffsets>,
        settings: PopSettings,
    ) -> Popper {
        let revive_topic = revive_topic(&settings.cluster);
        Popper {
            store,
            cold: RwLock::new(None),
            offsets,
            settings,
            revive_topic,
            ck_counter: AtomicU64::new(0),
            popping: Mutex::new(HashSet::new()),
        }
    }

    /// Tiered storage to read below the queues' local min offsets (None: local reads only).
    pub fn set_cold_reader(&self, cold: Option<Arc<dyn ColdReader>>) {
        *self.cold.write().unwrap() = cold;
    }

    fn cold(&self) -> Option<Arc<dyn ColdReader>> {
        self.cold.read().unwrap().clone()
    }

    /// The queue's min offset, counting what tiered storage holds.
    fn min_offset(&self, topic: &str, queue_id: i32) -> Result<i64, PopError> {
        let local = self.store.min_offset_in_queue(topic, queue_id)?;
        let cold = self.cold().and_then(|c| c.min_offset(topic, queue_id));
        Ok(cold.map_or(local, |c| c.min(local)))
    }

    pub fn settings(&self) -> &PopSettings {
        &self.settings
    }

    pub fn revive_topic(&self) -> &str {
        &self.revive_topic
    }

    pub fn store(&self) -> &Arc<MessageStore> {
        &self.store
    }

    /// One pass over the request's queues (and, not orderly, its retry topic: first in a fifth
    /// of the pops). `keep` (an SQL92 filter) sees each record of the request's topic. The
    /// checkpoints and acks written are given to `stored` (their arrivals wake the timer).
    pub fn pop(
        &self,
        req: &PopRequest<'_>,
        topics: &dyn Topics,
        keep: Option<Keep<'_>>,
        stored: &mut dyn FnMut(&PutResult),
    ) -> Result<Popped, PopError> {
        check_invisible_time(req.invisible_time)?;
        let now = now_ms();
        let revive_qid = if req.order {
            ORDER_REVIVE_QUEUE
        } else {
            let n = self.ck_counter.fetch_add(1, Ordering::Relaxed);
            (n % self.settings.revive_queues.max(1) as u64) as i32
        };
        let mut out = Popped {
            pop_time: now,
            invisible_time: req.invisible_time,
            revive_qid,
            ..Popped::default()
        };
        let start = fastrand::u32(0..100);
        // Priority order (PopMessageProcessor of 5.4): the queues from the highest down, the
        // retry topic after them (popFromRetryProbabilityForPriority is 0).
        let by_priority = !req.order && req.priority_factor.is_some_and(|f| start < f);
        let mut sources: Vec<(String, i32)> = self
            .queues(req, topics, start as i32, by_priority)
            .into_iter()
            .map(|q| (req.topic.to_string(), q))
            .collect();
        let retry = retry_topic(req.topic, req.group, self.settings.retry_v2);
        if !req.order && topics.read_queues(&retry).is_some() {
            if start < POP_FROM_RETRY_PROBABILITY && !by_priority {
                sources.insert(0, (retry, 0));
            } else {
                sources.push((retry, 0));
            }
        }
        let mut all = |_: &[u8]| true;
        let keep: Keep<'_> = match keep {
            Some(k) => k,
            None => &mut all,
        };
        for (topic, queue_id) in &sources {
            let left = req.max_msgs.saturating_sub(out.count);
            if left == 0 {
                out.rest += self.backlog(req.group, topic, *queue_id)?;
                continue;
            }
            self.pop_queue(req, topic, *queue_id, left, keep, &mut out, stored)?;
        }
        Ok(out)
    }

    /// The request's queue, or every read queue of its topic: from `start` on, or from the
    /// highest down `by_priority`.
    fn queues(
        &self,
        req: &PopRequest<'_>,
        topics: &dyn Topics,
        start: i32,
        by_priority: bool,
    ) -> Vec<i32> {
        if req.queue_id >= 0 {
            return vec![req.queue_id];
        }
        let n = topics.read_queues(req.topic).unwrap_or(0);
        if by_priority {
            return (0..n).rev().collect();
        }
        (0..n).map(|i| (start + i) % n).collect()
    }

    fn backlog(&self, group: &str, topic: &str, queue_id: i32) -> Result<i64, PopError> {
        let committed = self.offsets.query(group, topic, queue_id);
        let max = self.store.max_offset_in_queue(topic, queue_id)?;
        let min = self.store.min_offset_in_queue(topic, queue_id)?;
        Ok((max - committed.max(min)).max(0))
    }

    /// The group's committed offset, else (its first pop) the init offset, committed when
    /// `commit`.
    pub fn start_offset(
        &self,
        group: &str,
        topic: &str,
        queue_id: i32,
        init_mode: i32,
        commit: bool,
    ) -> Result<i64, PopError> {
        let offset = self.offsets.query(group, topic, queue_id);
        if offset >= 0 {
            return Ok(offset);
        }
        let min = self.min_offset(topic, queue_id)?;
        let max = self.store.max_offset_in_queue(topic, queue_id)?;
        // From the first message for a new topic (or one still whole), as Java's
        // initPopOffsetByCheckMsgInMem does while the queue's head is in memory.
        let offset = if init_mode == 0 || topic.starts_with(RETRY_PREFIX) || min <= 0 {
            min
        } else {
            (max - 1).max(0)
        };
        if commit {
            self.offsets.commit(group, topic, queue_id, offset);
        }
        Ok(offset)
    }

    fn read(
        &self,
        req: &PopRequest<'_>,
        topic: &str,
        queue_id: i32,
        offset: i64,
        count: usize,
    ) -> Result<GetResult, PopError> {
        let codes = if topic == req.topic {
            req.filter.codes()
        } else {
            None
        };
        let got =
            self.store
                .get_messages(topic, queue_id, offset, count, POP_READ_MAX_BYTES, codes)?;
        if got.status != GetStatus::OffsetTooSmall {
            return Ok(got);
        }
        let Some(cold) = self.cold() else {
            return Ok(got);
        };
        Ok(match cold.read(topic, queue_id, offset, count, codes) {
            ColdRead::NotThere => got,
            ColdRead::Found(found) => found,
            ColdRead::Unavailable => GetResult {
                status: GetStatus::MessageWasRemoving,
                next_begin_offset: offset,
                body: Vec::new(),
                message_count: 0,
                queue_offsets: Vec::new(),
                ..got
            },
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn pop_queue(
        &self,
        req: &PopRequest<'_>,
        topic: &str,
        queue_id: i32,
        count: usize,
        keep: Keep<'_>,
        out: &mut Popped,
        stored: &mut dyn FnMut(&PutResult),
    ) -> Result<(), PopError> {
        let (group, offsets) = (req.group, &self.offsets);
        if req.order && req.blocked.contains(&queue_id) {
            return Ok(()); // its last pop is neither acked nor visible again
        }
        let key = format!("{topic}@{group}@{queue_id}");
        let Some(_lock) = QueueLock::try_take(&self.popping, key) else {
            // Another pop reads it now: its messages count as left.
            out.rest += self.backlog(group, topic, queue_id)?;
            return Ok(());
        };
        let mut offset = self.start_offset(group, topic, queue_id, req.init_mode, true)?;
        let mut got = self.read(req, topic, queue_id, offset, count)?;
        if moved(got.status) {
            offsets.commit(group, topic, queue_id, got.next_begin_offset);
            offset = got.next_begin_offset;
            got = self.read(req, topic, queue_id, offset, count)?;
        }
        let mut records: Vec<(&[u8], i64)> = split_records(&got.body)
            .zip(got.queue_offsets.iter().copied())
            .collect();
        if topic == req.topic {
            records.retain(|(r, _)| keep(r));
        }
        if !records.is_empty() {
            let queue_offsets: Vec<i64> = records.iter().map(|(_, o)| *o).collect();
            if req.order {
                offsets.commit(group, topic, queue_id, offset);
            } else {
                let diffs: Vec<i64> = queue_offsets.iter().map(|o| o - offset).collect();
                let ck = CheckPointJson::new(
                    topic,
                    group,
                    queue_id,
                    offset,
                    &diffs,
                    out.pop_time,
                    req.invisible_time,
                    &self.settings.broker_name,
                );
                self.put_checkpoint(out.revive_qid, &ck, stored)?;
                offsets.commit(group, topic, queue_id, got.next_begin_offset);
            }
            let mark = retry_mark(topic);
            for (record, queue_offset) in &records {
                if mark == "0" {
                    out.body.extend_from_slice(record);
                } else {
                    // A retry message goes out as its topic's, with its receipt (the client
                    // cannot tell the retry topic from the message).
                    let receipt = ExtraInfo {
                        ck_offset: offset,
                        pop_time: out.pop_time,
                        invisible_time: out.invisible_time,
                        revive_qid: out.revive_qid,
                        mark: mark.to_string(),
                        broker_name: self.settings.broker_name.clone(),
                        queue_id,
                        offset: *queue_offset,
                    };
                    as_original(record, req.topic, &receipt, &mut out.body)?;
                }
            }
            out.count += records.len();
            out.takes.push(Take {
                topic: topic.to_string(),
                queue_id,
                start_offset: offset,
                queue_offsets,
            });
        } else if got.next_begin_offset > offset && (skipped(got.status) || got.message_count > 0) {
            // Only messages the filter does not take: the group is past them.
            offsets.commit(group, topic, queue_id, got.next_begin_offset);
        }
        let max = self.store.max_offset_in_queue(topic, queue_id)?;
        out.rest += (max - got.next_begin_offset).max(0);
        Ok(())
    }

    /// The ack's (or change's) queue and offset must exist (Java's codes and remarks).
    pub fn check_offset(
        &self,
        topics: &dyn Topics,
        group: &str,
        topic: &str,
        queue_id: i32,
        offset: i64,
        past_max: bool,
    ) -> Result<(), PopError> {
        let Some(read_queues) = topics.read_queues(topic) else {
            return Err(refuse(
                TOPIC_NOT_EXIST,
                format!("topic[{topic}] not exist, apply first please!"),
            ));
        };
        if queue_id < 0 || queue_id >= read_queues {
            return Err(refuse(
                MESSAGE_ILLEGAL,
                format!(
                    "queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:\
                     [{read_queues}] consumer:[{group}]"
                ),
            ));
        }
        let mut low = self.store.min_offset_in_queue(topic, queue_id)?;
        if offset < low {
            // Below the local min: tiered storage may hold it (asked only then: acks are hot).
            low = self.min_offset(topic, queue_id)?;
        }
        let high = self.store.max_offset_in_queue(topic, queue_id)?;
        if offset < low || offset > high || (!past_max && offset == high) {
            let committed = self.offsets.query(group, topic, queue_id);
            return Err(refuse(
                NO_MESSAGE,
                format!(
                    "offset is illegal, key:{topic}@{queue_id}, commit:{committed}, \
                     store:{low}~{high}"
                ),
            ));
        }
        Ok(())
    }

    /// ACK_MESSAGE of a message a (not orderly) pop took: an `ack` message, due when its
    /// checkpoint is.
    pub fn ack(
        &self,
        topics: &dyn Topics,
        a: &Receipted<'_>,
        stored: &mut dyn FnMut(&PutResult),
    ) -> Result<(), PopError> {
        self.check_offset(topics, a.group, a.topic, a.queue_id, a.offset, true)?;
        self.append_ack(a, stored)
    }

    /// The `ack` message of a checked ack.
    fn append_ack(
        &self,
        a: &Receipted<'_>,
        stored: &mut dyn FnMut(&PutResult),
    ) -> Result<(), PopError> {
        let r = &a.receipt;
        let (body, key) = ack_message(
            a.topic,
            a.group,
            a.queue_id,
            a.offset,
            r.ck_offset,
            r.pop_time,
            &r.broker_name,
        );
        // A receipt is the client's to send: any pop time and invisible time, summed saturating.
        let deliver = r.pop_time.saturating_add(r.invisible_time);
        let put = self.put_revive(r.revive_qid, ACK_TAG, &body, &key, deliver)?;
        stored(&put);
        Ok(())
    }

    /// CHANGE_MESSAGE_INVISIBLETIME of a message a (not orderly) pop took: a checkpoint of this
    /// message alone, due after the new invisible time, then an ack of the old one. Returns
    /// (popTime, invisibleTime, reviveQid) for the reply.
    pub fn change_invisible(
        &self,
        topics: &dyn Topics,
        a: &Receipted<'_>,
        invisible_time: i64,
        stored: &mut dyn FnMut(&PutResult),
    ) -> Result<(i64, i64, i32), PopError> {
        check_invisible_time(invisible_time)?;
        self.check_offset(topics, a.group, a.topic, a.queue_id, a.offset, false)?;
        let now = now_ms();
        let ck = CheckPointJson::new(
            a.topic,
            a.group,
            a.queue_id,
            a.offset,
            &[0],
            now,
            invisible_time,
            &a.receipt.broker_name,
        );
        self.put_checkpoint(a.receipt.revive_qid, &ck, stored)?;
        self.append_ack(a, stored)?;
        Ok((now, invisible_time, a.receipt.revive_qid))
    }

    /// A `ck` message, due one interval before its messages are visible again.
    fn put_checkpoint(
        &self,
        revive_qid: i32,
        ck: &CheckPointJson<'_>,
        stored: &mut dyn FnMut(&PutResult),
    ) -> Result<(), PopError> {
        let (body, key) = ck.message();
        let deliver = ck.revive_time.saturating_sub(ACK_TIME_INTERVAL_MS);
        let put = self.put_revive(revive_qid, CK_TAG, &body, &key, deliver)?;
        stored(&put);
        Ok(())
    }

    /// A message of the revive topic, due at `deliver_ms` (a timer message; at once when past).
    pub fn put_revive(
        &self,
        queue_id: i32,
        tag: &str,
        body: &[u8],
        uniq_key: &str,
        deliver_ms: i64,
    ) -> Result<PutResult, PopError> {
        let now = now_ms();
        let deliver = deliver_ms.to_string();
        let props = message::encode_properties([
            (property::TAGS, tag),
            (property::UNIQ_KEY, uniq_key),
            (property::TIMER_DELIVER_MS, deliver.as_str()),
        ]);
        let meta = MessageMeta {
            topic: &self.revive_topic,
            queue_id: queue_id.rem_euclid(self.settings.revive_queues.max(1)),
            flag: 0,
            sys_flag: 0,
            born_timestamp: now,
            born_host: self.settings.broker_addr,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        };
        self.store
            .put_message(&meta, body, &props)
            .map_err(|e| match e {
                StoreError::ReadOnly => refuse(SERVICE_NOT_AVAILABLE, e.to_string()),
                e => e.into(),
            })
    }
}

/// The records of a read, one by one.
pub fn split_records(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let size = body
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes(b.try_into().unwrap()) as usize)?;
        if size == 0 || at + size > body.len() {
            return None;
        }
        let record = &body[at..at + size];
        at += size;
        Some(record)
    })
}

/// `record` as a message of `topic` with its receipt in POP_CK (unless it has one), appended to
/// `out`: the rest of the record as it is.
fn as_original(
    record: &[u8],
    topic: &str,
    receipt: &ExtraInfo,
    out: &mut Vec<u8>,
) -> Result<(), PopError> {
    let view = RecordView::parse(record, false)?;
    let mut props = view.properties.to_string();
    if view.property(PROPERTY_POP_CK).is_none() {
        let receipt = receipt.to_string();
        message::append_properties(&mut props, [(PROPERTY_POP_CK, receipt.as_str())]);
    }
    let body_end = view.body.as_ptr() as usize - record.as_ptr() as usize + view.body.len();
    if topic.len() > 127 || props.len() > i16::MAX as usize {
        return Err(refuse(
            MESSAGE_ILLEGAL,
            "topic or properties too long for a record".to_string(),
        ));
    }
    let size = body_end + 1 + topic.len() + 2 + props.len();
    out.extend_from_slice(&(size as u32).to_be_bytes());
    out.extend_from_slice(&record[4..body_end]);
    out.push(topic.len() as u8);
    out.extend_from_slice(topic.as_bytes());
    out.extend_from_slice(&(props.len() as u16).to_be_bytes());
    out.extend_from_slice(props.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_read_by_one_pop_at_a_time() {
        let popping = Mutex::new(HashSet::new());
        let first = QueueLock::try_take(&popping, "T@g@0".to_string());
        assert!(first.is_some());
        // Taken: a second pop skips it, and leaves the first's lock alone.
        assert!(QueueLock::try_take(&popping, "T@g@0".to_string()).is_none());
        assert!(popping.lock().unwrap().contains("T@g@0"));
        drop(first);
        assert!(QueueLock::try_take(&popping, "T@g@0".to_string()).is_some());
    }

    #[test]
    fn receipts_round_trip() {
        let r = ExtraInfo::parse("5 1700000000000 30000 2 1 broker-a 3 7").unwrap();
        assert_eq!(r.ck_offset, 5);
        assert_eq!(r.offset, 7);
        assert_eq!(r.mark, "1");
        assert_eq!(r.to_string(), "5 1700000000000 30000 2 1 broker-a 3 7");
        // Seven fields: the offset is the checkpoint's.
        assert_eq!(ExtraInfo::parse("5 1 2 3 0 b 1").unwrap().offset, 5);
        assert!(ExtraInfo::parse("5 1 2 x 0 b 1").is_none());
        assert!(ExtraInfo::parse("").is_none());
    }

    #[test]
    fn retry_topics_and_marks() {
        assert_eq!(retry_topic("T", "g", false), "%RETRY%g_T");
        assert_eq!(retry_topic("T", "g", true), "%RETRY%g+T");
        assert_eq!(retry_mark("T"), "0");
        assert_eq!(retry_mark("%RETRY%g_T"), "1");
        assert_eq!(retry_mark("%RETRY%g+T"), "2");
        assert_eq!(real_topic("T", "g", "2"), "%RETRY%g+T");
    }

    #[test]
    fn checkpoint_json_has_fastjson_field_order() {
        let ck = CheckPointJson {
            bm: 0,
            bn: "b",
            c: "g",
            d: &[0, 2],
            it: 100,
            n: 2,
            pt: 1,
            q: 3,
            revive_time: 101,
            ro: 0,
            so: 4,
            t: "T",
        };
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&ck).unwrap()).unwrap(),
            r#"{"bm":0,"bn":"b","c":"g","d":[0,2],"it":100,"n":2,"pt":1,"q":3,"reviveTime":101,"ro":0,"so":4,"t":"T"}"#
        );
    }
}
