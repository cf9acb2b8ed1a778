//! SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE served on the data plane's threads.
//!
//! Python decides what may be served here and pushes it down as a [`SendConfig`]: the topics a
//! plain send may go to (existing, writable, not a retry or system topic), the broker's role
//! and flush mode, and the CLUSTER edit. A send this path is not sure of (a topic it does not
//! know, a transaction message, a header it cannot read, a store refusal) goes to Python whole,
//! which answers it as before: the rules and the refusals live in one place.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferromq_store::ha::HaMaster;
use ferromq_store::message::{normalize_host, sysflag, MessageMeta};
use ferromq_store::send::SCHEDULE_TOPIC;
use ferromq_store::send::{decode_batch, Edit, Rewrite};
use ferromq_store::MessageStore;

use crate::acl::AclRules;
use crate::codes::{
    FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SEND_BATCH_MESSAGE, SEND_MESSAGE, SEND_MESSAGE_V2,
    SLAVE_NOT_AVAILABLE, SUCCESS,
};
use crate::frame::{json_reply, Frame, Header};
use crate::plane::{Conn, Shared};
use crate::waits::{GroupWait, Replies};

pub fn is_send(code: i32) -> bool {
    matches!(code, SEND_MESSAGE | SEND_MESSAGE_V2 | SEND_BATCH_MESSAGE)
}

/// A topic plain sends may be stored into without asking Python.
#[derive(Debug, Clone, Copy)]
pub struct TopicRoute {
    pub write_queues: i32,
    pub read_queues: i32,
    pub multi_tag: bool,
}

/// What the data plane needs to serve sends; replaced whole when any of it changes.
pub struct SendConfig {
    pub store: Arc<MessageStore>,
    /// The HA service of a master, when it runs.
    pub ha: Option<Arc<HaMaster>>,
    pub sync_flush: bool,
    pub sync_master: bool,
    pub slave_timeout: Duration,
    /// `[set CLUSTER <cluster name>]`.
    pub edits: Vec<Edit>,
    pub region: String,
    pub trace_on: bool,
    pub topics: HashMap<String, TopicRoute>,
    /// With aclEnable=true: a send is served here only when these rules and the connection's
    /// [`crate::acl::PeerAcl`] allow it.
    pub acl: Option<AclRules>,
}

pub(crate) enum Outcome {
    Served,
    Forward,
}

/// The fields of a send header this path uses (SendMessageRequestHeader V1 names or V2
/// letters), or None when one is missing or does not parse as Java would: Python answers those.
struct SendRequest<'a> {
    topic: &'a str,
    queue_id: i32,
    sys_flag: i32,
    born_timestamp: i64,
    flag: i32,
    properties: &'a str,
    reconsume_times: i32,
    batch: bool,
}

const V1: [&str; 9] = [
    "producerGroup",
    "topic",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "batch",
];
const V2: [&str; 9] = ["a", "b", "e", "f", "g", "h", "i", "j", "m"];

impl<'a> SendRequest<'a> {
    fn read(ext: &'a HashMap<&str, String>) -> Option<SendRequest<'a>> {
        let names = if ext.contains_key("a") && !ext.contains_key("producerGroup") {
            &V2
        } else {
            &V1
        };
        let text = |i: usize| ext.get(names[i]).map(String::as_str);
        text(0)?;
        let int = |i: usize, default: Option<i32>| match text(i) {
            Some(v) => v.parse::<i32>().ok(),
            None => default,
        };
        let born_timestamp = match text(4) {
            Some(v) => v.parse::<i64>().ok()?,
            None => 0,
        };
        let batch = text(8).is_some_and(|b| b == "1" || b.eq_ignore_ascii_case("true"));
        Some(SendRequest {
            topic: text(1)?,
            queue_id: int(2, None)?,
            sys_flag: int(3, Some(0))?,
            born_timestamp,
            flag: int(5, Some(0))?,
            properties: text(6).unwrap_or(""),
            reconsume_times: int(7, Some(0))?,
            batch,
        })
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What one stored send tells the reply and the waits.
struct Stored {
    topic: String,
    queue_id: i32,
    next_offset: i64,
    messages: u64,
    wrote: u64,
    msg_id: String,
    queue_offset: i64,
    end: u64,
    wait: bool,
    /// None for a batch (its messages may carry different tags).
    tags_code: Option<i64>,
}

/// A [`SendConfig`] in service, with the groups of sends waiting for the disk and for slaves.
pub(crate) struct Served {
    pub(crate) cfg: SendConfig,
    flush: Arc<GroupWait>,
    replica: Option<Arc<GroupWait>>,
}

impl Served {
    pub(crate) fn new(cfg: SendConfig) -> Served {
        let store = cfg.store.clone();
        let flush_timeout = store.sync_flush_timeout();
        let flush = GroupWait::new(Box::new(move |offset, callback| {
            store.notify_flushed(offset, flush_timeout, callback)
        }));
        let slave_timeout = cfg.slave_timeout;
        let replica = cfg.ha.clone().map(|ha| {
            GroupWait::new(Box::new(move |offset, callback| {
                ha.notify_replicated(offset, slave_timeout, callback)
            }))
        });
        Served {
            cfg,
            flush,
            replica,
        }
    }
}

pub(crate) fn serve(
    shared: &Arc<Shared>,
    served: &Arc<Served>,
    conn: &Arc<Conn>,
    frame: &Frame<'_>,
    h: &Header<'_>,
    arrived_at: Instant,
    replies: &mut Vec<u8>,
) -> Outcome {
    let cfg = &served.cfg;
    let Some(ext) = h.ext_fields(cfg.acl.is_some()) else {
        return Outcome::Forward;
    };
    let Some(req) = SendRequest::read(&ext) else {
        return Outcome::Forward;
    };
    let Some(route) = cfg.topics.get(req.topic) else {
        return Outcome::Forward;
    };
    // (Python's guard reads the topic with the same naming rule as `SendRequest::read`.)
    if let Some(acl) = &cfg.acl {
        if !acl.allows(conn.peer_acl().as_deref(), &ext, req.topic, frame.body()) {
            return Outcome::Forward;
        }
    }
    // Transaction half messages are Python's (a substring test: Python reads the value).
    if req.properties.contains("TRAN_MSG") {
        return Outcome::Forward;
    }
    let mut queue_id = req.queue_id;
    if queue_id < 0 {
        if route.write_queues <= 0 {
            return Outcome::Forward;
        }
        queue_id = fastrand::i32(0..route.write_queues);
    }
    if queue_id >= route.write_queues.max(route.read_queues) {
        return Outcome::Forward; // Python names the illegal queue
    }
    let mut sys_flag = req.sys_flag;
    if route.multi_tag {
        sys_flag |= sysflag::MULTI_TAGS;
    }
    // A prepared flag without TRAN_MSG is stored plainly (as the Python path does).
    if sys_flag & sysflag::TRANSACTION_ROLLBACK_TYPE == sysflag::TRANSACTION_PREPARED_TYPE {
        sys_flag &= !sysflag::TRANSACTION_ROLLBACK_TYPE;
    }
    let meta = MessageMeta {
        topic: req.topic,
        queue_id,
        flag: req.flag,
        sys_flag,
        born_timestamp: if req.born_timestamp > 0 {
            req.born_timestamp
        } else {
            now_ms()
        },
        born_host: normalize_host(conn.peer),
        reconsume_times: req.reconsume_times,
        prepared_transaction_offset: 0,
    };
    let rw = Rewrite {
        edits: &cfg.edits,
        drop_wait: !req.batch,
        schedule: true,
    };
    let put_started = Instant::now();
    let stored = if req.batch {
        decode_batch(frame.body())
            .and_then(|items| {
                cfg.store
                    .send_batch(&meta, &items, req.properties, &rw)
                    .map(|r| (r, items.len()))
            })
            .map(|(r, n)| Stored {
                end: r.end_offset(),
                msg_id: r.msg_ids().join(","),
                next_offset: r.first_queue_offset + n as i64,
                queue_offset: r.first_queue_offset,
                messages: n as u64,
                wrote: r.wrote_bytes as u64,
                wait: r.wait,
                tags_code: None,
                topic: r.topic,
                queue_id: r.queue_id,
            })
    } else {
        cfg.store
            .send(&meta, frame.body(), req.properties, &rw)
            .map(|r| Stored {
                end: r.end_offset(),
                msg_id: r.msg_id(),
                next_offset: r.queue_offset + 1,
                queue_offset: r.queue_offset,
                messages: 1,
                wrote: r.wrote_bytes as u64,
                wait: r.wait,
                tags_code: Some(r.tags_code),
                topic: r.topic,
                queue_id: r.queue_id,
            })
    };
    let Ok(s) = stored else {
        // Nothing was stored: Python tries again and answers the refusal as it always has.
        return Outcome::Forward;
    };
    shared.put_done(&s.topic, s.messages, s.wrote, put_started.elapsed());
    let reply = SendReply {
        code: h.code,
        opaque: h.opaque,
        oneway: h.is_oneway(),
        // The queue the producer asked for, as Java answers (even for a delayed message).
        ext: [
            s.msg_id,
            queue_id.to_string(),
            s.queue_offset.to_string(),
            cfg.region.clone(),
            if cfg.trace_on { "true" } else { "false" }.to_string(),
        ],
        arrived_at,
    };
    let flush = s.wait && cfg.sync_flush;
    let mut replica = s.wait && cfg.sync_master;
    let mut replica_code = SUCCESS;
    if replica && !cfg.ha.as_ref().is_some_and(|m| m.is_slave_ok(s.end)) {
        (replica, replica_code) = (false, SLAVE_NOT_AVAILABLE);
    }
    let arrival = (s.topic, s.queue_id, s.next_offset, s.tags_code);
    if !flush {
        arrived(shared, cfg, arrival.clone());
        if !replica {
            reply.append_to(shared, replies, replica_code);
            return Outcome::Served;
        }
    }
    // The flush thread (then the HA threads) answer, in groups (see `waits`).
    let conn_of_reply = conn.clone();
    let answer = move |shared: &Shared, code: i32, replies: &mut Replies| {
        reply.append_for(shared, &conn_of_reply, code, replies);
    };
    let shared = shared.clone();
    if flush {
        let served2 = served.clone();
        let replica_wait = if replica {
            served.replica.clone()
        } else {
            None
        };
        let end = s.end;
        served.flush.wait(
            end,
            Box::new(move |flushed, replies| {
                arrived(&shared, &served2.cfg, arrival);
                let flush_code = if flushed { SUCCESS } else { FLUSH_DISK_TIMEOUT };
                match replica_wait {
                    Some(wait) => wait.wait(
                        end,
                        Box::new(move |copied, replies| {
                            let code = if copied {
                                flush_code
                            } else {
                                FLUSH_SLAVE_TIMEOUT
                            };
                            answer(&shared, code, replies);
                        }),
                    ),
                    None => {
                        let code = if replica_code != SUCCESS {
                            replica_code
                        } else {
                            flush_code
                        };
                        answer(&shared, code, replies);
                    }
                }
            }),
        );
    } else if let Some(wait) = &served.replica {
        wait.wait(
            s.end,
            Box::new(move |copied, replies| {
                let code = if copied { SUCCESS } else { FLUSH_SLAVE_TIMEOUT };
                answer(&shared, code, replies);
            }),
        );
    }
    Outcome::Served
}

/// (topic, queue id, next offset, tags code).
type Arrived = (String, i32, i64, Option<i64>);

fn arrived(shared: &Arc<Shared>, cfg: &SendConfig, (topic, queue_id, next_offset, tags): Arrived) {
    if let Some(ha) = &cfg.ha {
        ha.notify_appended();
    }
    let wake = topic == SCHEDULE_TOPIC;
    shared.arrived(topic, queue_id, next_offset, tags, wake);
}

struct SendReply {
    code: i32,
    opaque: i32,
    oneway: bool,
    /// msgId, queueId, queueOffset, MSG_REGION, TRACE_ON.
    ext: [String; 5],
    arrived_at: Instant,
}

impl SendReply {
    /// Adds the reply to the replies released with it for its connection.
    fn append_for(self, shared: &Shared, conn: &Arc<Conn>, code: i32, replies: &mut Replies) {
        let out = &mut replies
            .entry(conn.id)
            .or_insert_with(|| (conn.clone(), Vec::new()))
            .1;
        self.append_to(shared, out, code);
    }

    /// Adds the reply to `out` (the replies of one read go out in one write).
    fn append_to(self, shared: &Shared, out: &mut Vec<u8>, code: i32) {
        shared.rpc_done(self.code, code, self.arrived_at.elapsed());
        if self.oneway {
            return;
        }
        let e = &self.ext;
        let frame = json_reply(
            code,
            self.opaque,
            None,
            &[
                ("msgId", &e[0]),
                ("queueId", &e[1]),
                ("queueOffset", &e[2]),
                ("MSG_REGION", &e[3]),
                ("TRACE_ON", &e[4]),
            ],
        );
        out.extend_from_slice(&frame);
    }
}
