//! The rules of a send, in one place: which queue, which flags, which property edits, the store
//! call, and when and with which code the producer is answered (after the disk in SYNC_FLUSH,
//! after a slave in SYNC_MASTER). The data plane ([`crate::send`]) applies them to the sends it
//! serves; the broker's Python applies them through the binding's `_store.Sender` to the sends
//! it decides itself (new topics, dead letters, transaction half messages, dataPlane=python).
//!
//! Python's own decisions stay Python's and reach here as a [`Redirect`]: whether a topic may be
//! sent to or created, whether a retry is a dead letter, whether a half message is accepted.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferromq_store::ha::HaMaster;
use ferromq_store::lmq;
use ferromq_store::message::{get_property, property, sysflag, MessageMeta};
use ferromq_store::send::{decode_batch, Edit, Rewrite};
use ferromq_store::{MessageStore, StoreError};

use crate::waits::{GroupWait, Replies};
use ferromq_remoting::codes::{
    FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, RETRY_PREFIX, SLAVE_NOT_AVAILABLE, SUCCESS,
    SYSTEM_ERROR, TRANS_HALF_TOPIC,
};

/// What a send's topic allows: its queues, whether its tags are multi-tags, and the messages a
/// 5.x client may send to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicRoute {
    pub write_queues: i32,
    pub read_queues: i32,
    pub multi_tag: bool,
    pub message_type: MessageType,
}

/// A topic's `message.type` attribute (RocketMQ 5.x's TopicMessageType), or the type of a 5.x
/// client's message; the gRPC front refuses a message whose type is not its topic's (unless the
/// topic's is MIXED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MessageType {
    Unspecified,
    #[default]
    Normal,
    Fifo,
    Delay,
    Transaction,
    /// RocketMQ 5.4's priority messages: a message's `_SYS_MSG_PRIORITY_` picks its queue.
    Priority,
    /// RocketMQ 5.5's lite messages: a message's `__LITE_TOPIC` names its light message queue.
    Lite,
    Mixed,
}

impl MessageType {
    /// The attribute's value; anything else is UNSPECIFIED (which accepts no message).
    pub fn parse(name: &str) -> MessageType {
        match name {
            "NORMAL" => MessageType::Normal,
            "FIFO" => MessageType::Fifo,
            "DELAY" => MessageType::Delay,
            "TRANSACTION" => MessageType::Transaction,
            "PRIORITY" => MessageType::Priority,
            "LITE" => MessageType::Lite,
            "MIXED" => MessageType::Mixed,
            _ => MessageType::Unspecified,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MessageType::Unspecified => "UNSPECIFIED",
            MessageType::Normal => "NORMAL",
            MessageType::Fifo => "FIFO",
            MessageType::Delay => "DELAY",
            MessageType::Transaction => "TRANSACTION",
            MessageType::Priority => "PRIORITY",
            MessageType::Lite => "LITE",
            MessageType::Mixed => "MIXED",
        }
    }

    /// Whether a topic of this type takes a message of type `message`.
    pub fn accepts(self, message: MessageType) -> bool {
        self == MessageType::Mixed || self == message
    }

    /// A message's type by its properties, `get` reading one, in the order that keeps the types
    /// apart (TopicMessageType.parseFromMessageProperty): what a 5.x send is checked against its
    /// topic's `message.type` with, what a received message shows, and whether a send's priority
    /// picks its queue.
    pub fn of_message<S: AsRef<str>>(get: impl Fn(&str) -> Option<S>) -> MessageType {
        if get(property::TRAN_MSG).is_some_and(|v| v.as_ref().eq_ignore_ascii_case("true")) {
            return MessageType::Transaction;
        }
        let delay = [
            property::DELAY,
            property::TIMER_DELIVER_MS,
            property::TIMER_DELAY_SEC,
            property::TIMER_DELAY_MS,
        ];
        if delay.iter().any(|name| get(name).is_some()) {
            return MessageType::Delay;
        }
        if get(property::SHARDING_KEY).is_some() {
            return MessageType::Fifo;
        }
        if get(property::PRIORITY).is_some() {
            return MessageType::Priority;
        }
        if get(property::LITE_TOPIC).is_some() {
            return MessageType::Lite;
        }
        MessageType::Normal
    }
}

/// The light message queue of lite topic `lite` under `parent` (LiteUtil.toLmqName,
/// `%LMQ%$<parent>$<lite>`). Refused unless the lite topic is letters, digits, '-' and '_' (what
/// the 5.x proxy allows; over remoting a ',' or a '$' would name other queues).
pub fn lite_queue(parent: &str, lite: &str) -> Result<String, StoreError> {
    let valid = lite.len() <= MAX_LITE_TOPIC_BYTES
        && lite
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid {
        return Err(StoreError::MessageIllegal(format!(
            "lite topic {lite:?} can only contain alphanumeric characters, hyphens(-), and \
             underscores(_), {MAX_LITE_TOPIC_BYTES} bytes at most"
        )));
    }
    Ok(format!("{}${parent}${lite}", lmq::LMQ_PREFIX))
}

/// A message's priority (`Message.getPriority`): its `_SYS_MSG_PRIORITY_` as an int, -1 when it
/// has none or it is not one.
pub fn priority_of(properties: &str) -> i32 {
    get_property(properties, property::PRIORITY)
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1)
}

/// The longest lite topic (the proxy's maxLiteTopicSize).
pub const MAX_LITE_TOPIC_BYTES: usize = 64;

/// The broker's settings a send depends on; a [`Sender`] is made anew when any of them changes.
pub struct SendSettings {
    pub store: Arc<MessageStore>,
    /// The HA service of a master, when it runs.
    pub ha: Option<Arc<HaMaster>>,
    pub sync_flush: bool,
    pub sync_master: bool,
    /// Controller mode: the master is its SyncStateSet's only member and acknowledges alone.
    pub ack_alone: bool,
    pub slave_timeout: Duration,
    pub cluster: String,
    pub broker_name: String,
    pub region: String,
    pub trace_on: bool,
    /// Readers see only what the replicas acknowledged (controller mode with replicas in the
    /// SyncStateSet, `MessageStore::confirm_reads_by`): a message may be read, and its pulls
    /// woken, once the replica wait is over, not at the store or the flush.
    pub reads_wait_for_replicas: bool,
}

/// RocketMQ's recall handle of a timer message (`RecallMessageHandle.HandleV1`): URL-safe
/// base64 of "v1 TOPIC BROKER_NAME DELIVER_MS UNIQ_KEY", the deliver time one past the rounded
/// one, so that the recall lands in the same slot.
pub fn recall_handle(topic: &str, broker_name: &str, deliver_ms: i64, uniq_key: &str) -> String {
    use base64::Engine;
    let raw = format!("v1 {topic} {broker_name} {deliver_ms} {uniq_key}");
    base64::engine::general_purpose::URL_SAFE.encode(raw)
}

/// The fields of a SendMessageRequestHeader a send is made of.
#[derive(Debug, Clone, Copy)]
pub struct SendRequest<'a> {
    pub producer_group: &'a str,
    pub topic: &'a str,
    /// Negative: any writable queue.
    pub queue_id: i32,
    pub sys_flag: i32,
    /// Zero or less: now.
    pub born_timestamp: i64,
    pub flag: i32,
    pub properties: &'a str,
    pub reconsume_times: i32,
    pub batch: bool,
}

/// Where the broker's decisions send a message instead of its topic.
#[derive(Debug, Clone, Copy)]
pub enum Redirect<'a> {
    /// A retry consumed too often: the group's dead-letter topic, queue 0, without DELAY.
    DeadLetter { topic: &'a str },
    /// A transaction half message: the half topic, queue 0, its real topic and queue kept in
    /// REAL_TOPIC and REAL_QID (and PGROUP, unless the producer set it).
    Half,
}

/// A send the rules refuse, with the code and remark it is answered with.
#[derive(Debug)]
pub enum SendError {
    IllegalQueue {
        queue_id: i32,
        topic: String,
        producer: SocketAddr,
    },
    Store(StoreError),
}

impl SendError {
    pub fn code(&self) -> i32 {
        match self {
            SendError::IllegalQueue { .. } => SYSTEM_ERROR,
            SendError::Store(e) => ferromq_remoting::codes::of_store_error(e),
        }
    }
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::IllegalQueue {
                queue_id,
                topic,
                producer,
            } => write!(
                f,
                "request queueId[{queue_id}] is illegal, {topic} Producer: {producer}"
            ),
            SendError::Store(e) => e.fmt(f),
        }
    }
}

/// What a stored send tells its reply, the statistics and the pulls waiting for it.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Where the message(s) went (the schedule topic for a delayed message).
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub next_offset: i64,
    pub messages: u64,
    pub wrote_bytes: u64,
    /// Comma-separated for a batch.
    pub msg_id: String,
    /// The queue the producer asked for (or was given): the reply names it, as Java's does,
    /// even when the message is stored elsewhere.
    pub reply_queue_id: i32,
    pub end_offset: u64,
    /// False when the producer said WAIT=false: answered at once.
    pub wait: bool,
    /// None for a batch (its messages may carry different tags).
    pub tags_code: Option<i64>,
    /// A timer message's handle for RECALL_MESSAGE (see [`recall_handle`]).
    pub recall_handle: Option<String>,
    /// The request's UNIQ_KEY (a batch's own), which 5.x replies name: `transactionId` for one
    /// message (Apache RocketMQ's 5.x proxy ends a transaction with it), `batchUniqId` for a batch.
    pub uniq_key: Option<String>,
    pub batch: bool,
    /// The light message queues the message was dispatched to, each with its next offset
    /// ([`ferromq_store::PutResult::lmq_arrivals`]); empty for a batch.
    pub lmq_arrivals: Vec<(String, i64)>,
}

/// What a waiting send does with its code once it is decided.
pub(crate) type Answer = Box<dyn FnOnce(i32, &mut Replies) + Send>;

/// What runs once a stored message may be read (it wakes the pulls waiting for it).
type Arrived = Box<dyn FnOnce() + Send>;

/// The waits of one send (the flush's, the slave's), answered when the last is in (and its
/// arrival told then, when reads wait for the replicas).
struct Joint {
    left: u8,
    flush_code: i32,
    replica_code: i32,
    arrived: Option<Arrived>,
    answer: Option<Answer>,
}

impl Joint {
    fn done(joint: &Mutex<Joint>, replies: &mut Replies, note: impl FnOnce(&mut Joint)) {
        let ready = {
            let mut j = joint.lock().unwrap();
            note(&mut j);
            j.left -= 1;
            let code = if j.replica_code != SUCCESS {
                j.replica_code
            } else {
                j.flush_code
            };
            (j.left == 0).then(|| (j.arrived.take(), j.answer.take(), code))
        };
        if let Some((arrived, answer, code)) = ready {
            if let Some(arrived) = arrived {
                arrived();
            }
            if let Some(answer) = answer {
                answer(code, replies);
            }
        }
    }
}

/// The send rules of one [`SendSettings`], with the groups of sends waiting for the disk and for
/// slaves (see `waits`).
pub struct Sender {
    pub settings: SendSettings,
    /// `[set CLUSTER <cluster name>]`: what every send's properties get.
    cluster: Vec<Edit>,
    flush: Arc<GroupWait>,
    replica: Option<Arc<GroupWait>>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Sender {
    /// Fails when the cluster name cannot be a property value (empty, or holding a separator).
    pub fn new(settings: SendSettings) -> Result<Sender, StoreError> {
        let cluster = vec![Edit::new("set", property::CLUSTER, &settings.cluster)?];
        let store = settings.store.clone();
        let flush_timeout = store.sync_flush_timeout();
        let flush = GroupWait::new(Box::new(move |offset, callback| {
            store.notify_flushed(offset, flush_timeout, callback)
        }));
        let slave_timeout = settings.slave_timeout;
        let replica = match (&settings.ha, settings.ack_alone) {
            (Some(ha), false) => {
                let ha = ha.clone();
                Some(GroupWait::new(Box::new(move |offset, callback| {
                    ha.notify_replicated(offset, slave_timeout, callback)
                })))
            }
            _ => None,
        };
        Ok(Sender {
            settings,
            cluster,
            flush,
            replica,
        })
    }

    /// CLUSTER set, then `edits` ((operation, name, value), see [`Edit::new`]).
    fn with_cluster(&self, edits: &[(&str, &str, &str)]) -> Result<Vec<Edit>, SendError> {
        let mut out = self.cluster.clone();
        for (op, name, value) in edits {
            out.push(Edit::new(op, name, value).map_err(SendError::Store)?);
        }
        Ok(out)
    }

    /// Applies the rules and stores the send: the queue (a random writable one when none is
    /// asked for), the multi-tag flag, the broker's redirect, CLUSTER, and WAIT dropped where
    /// Java 4.9.7 drops it (a single message's properties it does not re-encode).
    pub fn put(
        &self,
        req: &SendRequest<'_>,
        route: TopicRoute,
        redirect: Option<Redirect<'_>>,
        body: &[u8],
        producer: SocketAddr,
    ) -> Result<Stored, SendError> {
        let mut queue_id = req.queue_id;
        if queue_id < 0 && route.write_queues > 0 {
            queue_id = fastrand::i32(0..route.write_queues);
        }
        if queue_id < 0 || queue_id >= route.write_queues.max(route.read_queues) {
            return Err(SendError::IllegalQueue {
                queue_id,
                topic: req.topic.to_string(),
                producer,
            });
        }
        // A single message's priority (RocketMQ 5.4): on a message of type PRIORITY by its
        // properties (whatever its topic's type), it picks the queue, the highest writable one
        // at most; on any other, the broker drops it.
        let mut extra: Vec<Edit> = Vec::new();
        let priority = priority_of(req.properties);
        if !req.batch && priority >= 0 {
            let props = req.properties;
            if redirect.is_none()
                && MessageType::of_message(|name| get_property(props, name))
                    == MessageType::Priority
            {
                queue_id = priority.min(route.write_queues - 1).max(0);
            } else {
                extra.push(Edit::Remove(property::PRIORITY.to_string()));
            }
        }
        // A lite message (RocketMQ 5.5) is dispatched also to its lite topic's light message queue,
        // whatever its topic's type (SendMessageProcessor); the store does so with enableLmq.
        if let Some(lite) = get_property(req.properties, property::LITE_TOPIC)
            .filter(|l| !l.is_empty() && !req.batch)
        {
            extra.push(Edit::Set(
                lmq::INNER_MULTI_DISPATCH.to_string(),
                lite_queue(req.topic, lite).map_err(SendError::Store)?,
            ));
        }
        let reply_queue_id = queue_id;
        let mut sys_flag = req.sys_flag;
        if route.multi_tag {
            sys_flag |= sysflag::MULTI_TAGS;
        }
        let mut topic = req.topic;
        let mut drop_wait = !req.batch;
        let redirected: Vec<Edit>;
        let edits: &[Edit] = match redirect {
            None => {
                // A prepared flag without TRAN_MSG is not a transaction the broker can finish:
                // it is stored plainly.
                if sys_flag & sysflag::TRANSACTION_ROLLBACK_TYPE
                    == sysflag::TRANSACTION_PREPARED_TYPE
                {
                    sys_flag &= !sysflag::TRANSACTION_ROLLBACK_TYPE;
                }
                &self.cluster
            }
            Some(Redirect::DeadLetter { topic: dlq }) => {
                redirected = self.with_cluster(&[("remove", property::DELAY, "")])?;
                (topic, queue_id) = (dlq, 0);
                &redirected
            }
            Some(Redirect::Half) => {
                redirected = self.with_cluster(&[
                    ("set", property::REAL_TOPIC, topic),
                    ("set", property::REAL_QID, &queue_id.to_string()),
                    ("default", property::PRODUCER_GROUP, req.producer_group),
                ])?;
                (topic, queue_id) = (TRANS_HALF_TOPIC, 0);
                sys_flag &= !sysflag::TRANSACTION_ROLLBACK_TYPE;
                // A half message keeps WAIT, as 4.9.7 (which re-encodes its properties) does.
                drop_wait = false;
                &redirected
            }
        };
        let with_extra: Vec<Edit>;
        let edits = if extra.is_empty() {
            edits
        } else {
            with_extra = edits.iter().cloned().chain(extra).collect();
            &with_extra
        };
        let meta = MessageMeta {
            topic,
            queue_id,
            flag: req.flag,
            sys_flag,
            born_timestamp: if req.born_timestamp > 0 {
                req.born_timestamp
            } else {
                now_ms()
            },
            born_host: producer,
            reconsume_times: req.reconsume_times,
            prepared_transaction_offset: 0,
        };
        let rw = Rewrite {
            edits,
            drop_wait,
            schedule: true,
        };
        let store = &self.settings.store;
        let uniq_key = get_property(req.properties, property::UNIQ_KEY).map(str::to_owned);
        let stored = if req.batch {
            decode_batch(body).and_then(|items| {
                let r = store.send_batch(&meta, &items, req.properties, &rw)?;
                let n = items.len() as i64;
                Ok(Stored {
                    end_offset: r.end_offset(),
                    msg_id: r.msg_ids().join(","),
                    next_offset: r.first_queue_offset + n,
                    queue_offset: r.first_queue_offset,
                    messages: n as u64,
                    wrote_bytes: r.wrote_bytes as u64,
                    wait: r.wait,
                    tags_code: None,
                    topic: r.topic,
                    queue_id: r.queue_id,
                    reply_queue_id,
                    recall_handle: None,
                    uniq_key: uniq_key.clone(),
                    batch: true,
                    lmq_arrivals: Vec::new(),
                })
            })
        } else {
            store
                .send(&meta, body, req.properties, &rw)
                .map(|r| Stored {
                    // A retry topic's timer messages get no recall handle.
                    recall_handle: r
                        .timer_out_ms
                        .filter(|_| !topic.starts_with(RETRY_PREFIX))
                        .and_then(|out| {
                            let uniq = get_property(req.properties, property::UNIQ_KEY)?;
                            let name = &self.settings.broker_name;
                            Some(recall_handle(topic, name, out + 1, uniq))
                        }),
                    end_offset: r.end_offset(),
                    msg_id: r.msg_id(),
                    next_offset: r.queue_offset + 1,
                    queue_offset: r.queue_offset,
                    messages: 1,
                    wrote_bytes: r.wrote_bytes as u64,
                    wait: r.wait,
                    tags_code: Some(r.tags_code),
                    topic: r.topic,
                    queue_id: r.queue_id,
                    reply_queue_id,
                    uniq_key,
                    batch: false,
                    lmq_arrivals: r.lmq_arrivals,
                })
        };
        stored.map_err(SendError::Store)
    }

    /// The reply's header fields (SendMessageResponseHeader and the broker's two extras), with
    /// 5.x's `transactionId` / `batchUniqId` and a timer message's `recallHandle` (5.3.2+).
    pub fn reply_fields(&self, s: &Stored) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("msgId", s.msg_id.clone()),
            ("queueId", s.reply_queue_id.to_string()),
            ("queueOffset", s.queue_offset.to_string()),
            ("MSG_REGION", self.settings.region.clone()),
            ("TRACE_ON", self.settings.trace_on.to_string()),
        ];
        if let Some(uniq) = &s.uniq_key {
            let name = if s.batch {
                "batchUniqId"
            } else {
                "transactionId"
            };
            fields.push((name, uniq.clone()));
        }
        if let Some(handle) = &s.recall_handle {
            fields.push(("recallHandle", handle.clone()));
        }
        fields
    }

    /// When the producer is answered, and with what, as CommitLog.asyncPutMessage combines the
    /// waits, both started at once: in SYNC_FLUSH after the disk (FLUSH_DISK_TIMEOUT when it is
    /// late), in SYNC_MASTER after a slave (SLAVE_NOT_AVAILABLE, decided at once, when no slave
    /// is within haSlaveFallbehindMax; FLUSH_SLAVE_TIMEOUT when none reports within
    /// slaveTimeout; either takes precedence over the flush's code). Returns the code when it is
    /// known now; else the answer `answer` makes gets it later, on the thread that learnt the
    /// last of it. `arrived` runs once the message may be read: after the flush in SYNC_FLUSH,
    /// after every wait when reads wait for the replicas, before the answer.
    pub(crate) fn settle(
        &self,
        s: &Stored,
        arrived: Arrived,
        answer: impl FnOnce() -> Answer,
    ) -> Option<i32> {
        let flush = s.wait && self.settings.sync_flush;
        let mut replica = s.wait && self.settings.sync_master;
        let mut replica_code = SUCCESS;
        if replica && !self.slave_ok(s.end_offset) {
            (replica, replica_code) = (false, SLAVE_NOT_AVAILABLE);
        }
        // With ack_alone there is no slave to wait for: its acknowledgement is the master's own.
        let replica_wait = if replica { self.replica.clone() } else { None };
        // When the message may be read: now, after the flush, or after every wait (reads bounded
        // by the replicas' acknowledgement).
        let (mut now, mut after_flush, mut after_all) = (None, None, None);
        if self.settings.reads_wait_for_replicas && replica_wait.is_some() {
            after_all = Some(arrived);
        } else if flush {
            after_flush = Some(arrived);
        } else {
            now = Some(arrived);
        }
        if let Some(arrived) = now {
            arrived();
        }
        if !flush && replica_wait.is_none() {
            return Some(replica_code);
        }
        let joint = Arc::new(Mutex::new(Joint {
            left: u8::from(flush) + u8::from(replica_wait.is_some()),
            flush_code: SUCCESS,
            replica_code,
            arrived: after_all,
            answer: Some(answer()),
        }));
        let end = s.end_offset;
        if flush {
            let joint = joint.clone();
            self.flush.wait(
                end,
                Box::new(move |flushed, replies| {
                    if let Some(arrived) = after_flush {
                        arrived();
                    }
                    Joint::done(&joint, replies, |j| {
                        if !flushed {
                            j.flush_code = FLUSH_DISK_TIMEOUT;
                        }
                    });
                }),
            );
        }
        if let Some(wait) = replica_wait {
            wait.wait(
                end,
                Box::new(move |copied, replies| {
                    Joint::done(&joint, replies, |j| {
                        if !copied {
                            j.replica_code = FLUSH_SLAVE_TIMEOUT;
                        }
                    });
                }),
            );
        }
        None
    }

    /// `Sender::settle` for a caller that writes its own replies (the binding).
    pub fn settle_then(
        &self,
        s: &Stored,
        arrived: Box<dyn FnOnce() + Send>,
        answered: Box<dyn FnOnce(i32) + Send>,
    ) -> Option<i32> {
        self.settle(s, arrived, || Box::new(move |code, _| answered(code)))
    }

    /// RocketMQ's `isSlaveOK`: a slave is connected and within haSlaveFallbehindMax.
    fn slave_ok(&self, end: u64) -> bool {
        self.settings
            .ha
            .as_ref()
            .is_some_and(|ha| self.settings.ack_alone || ha.is_slave_ok(end))
    }
}
