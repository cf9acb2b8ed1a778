//! SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE served on the data plane's threads.
//!
//! Python decides which topics a send may go to here and pushes them down as a [`SendConfig`]
//! (existing, writable, neither a retry nor a system topic) with the broker's [`Sender`], the
//! send rules both sides apply. A send whose decisions are Python's (a topic it does not list, a
//! transaction half message, a header it cannot read, one the ACL must look at) goes to Python
//! whole, before anything is stored; a send served here is answered here, refusals included.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use ferromq_store::message::{normalize_host, property};
use ferromq_store::send::SCHEDULE_TOPIC;

use crate::acl::AclRules;
use crate::conn::Conn;
use crate::hub::{Hub, Outcome};
use crate::pull;
use crate::sender::{Answer, SendError, SendRequest, Sender, Stored, TopicRoute};
use crate::waits::Replies;
use ferromq_remoting::frame::{json_reply, Frame, Header};

/// What the data plane needs to serve sends; replaced whole when any of it changes.
pub struct SendConfig {
    pub sender: Arc<Sender>,
    /// The topics plain sends may be stored into without asking Python.
    pub topics: HashMap<String, TopicRoute>,
    /// With aclEnable=true: a send is served here only when these rules and the connection's
    /// [`crate::acl::PeerAcl`] allow it.
    pub acl: Option<AclRules>,
}

/// SendMessageRequestHeader's fields by their V1 names and by SEND_MESSAGE_V2's letters.
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

/// (V1 name, V2 letter) of each field the plane reads. The binding exports it as
/// `_store.SEND_V2_LETTERS`; a Python unit test checks `SEND_V2_NAMES` against it.
pub fn v2_letters() -> Vec<(&'static str, &'static str)> {
    V1.into_iter().zip(V2).collect()
}

/// The send a header asks for, or None when a field is missing or does not parse as Java would
/// (Python answers those with the field's name).
fn read_request<'a>(ext: &'a HashMap<&str, String>) -> Option<SendRequest<'a>> {
    let names = if ext.contains_key("a") && !ext.contains_key("producerGroup") {
        &V2
    } else {
        &V1
    };
    let text = |i: usize| ext.get(names[i]).map(String::as_str);
    let int = |i: usize, default: Option<i32>| match text(i) {
        Some(v) => v.parse::<i32>().ok(),
        None => default,
    };
    let born_timestamp = match text(4) {
        Some(v) => v.parse::<i64>().ok()?,
        None => 0,
    };
    Some(SendRequest {
        producer_group: text(0)?,
        topic: text(1)?,
        queue_id: int(2, None)?,
        sys_flag: int(3, Some(0))?,
        born_timestamp,
        flag: int(5, Some(0))?,
        properties: text(6).unwrap_or(""),
        reconsume_times: int(7, Some(0))?,
        batch: text(8).is_some_and(|b| b == "1" || b.eq_ignore_ascii_case("true")),
    })
}

pub(crate) fn serve(
    hub: &Arc<Hub>,
    cfg: &SendConfig,
    conn: &Arc<Conn>,
    frame: &Frame<'_>,
    h: &Header<'_>,
    arrived_at: Instant,
    replies: &mut Vec<u8>,
) -> Outcome {
    let Some(ext) = h.ext_fields(cfg.acl.is_some()) else {
        return Outcome::Forward;
    };
    let Some(req) = read_request(&ext) else {
        return Outcome::Forward;
    };
    let Some(route) = cfg.topics.get(req.topic) else {
        return Outcome::Forward;
    };
    // (Python's guard reads the topic with the same naming rule as `read_request`.)
    if let Some(acl) = &cfg.acl {
        if !acl.allows(conn.peer_acl().as_deref(), &ext, req.topic, frame.body()) {
            return Outcome::Forward;
        }
    }
    // Transaction half messages are Python's (a substring test: Python reads the value).
    if req.properties.contains(property::TRAN_MSG) {
        return Outcome::Forward;
    }
    let sender = &cfg.sender;
    let put_started = Instant::now();
    let producer = normalize_host(conn.peer);
    let stored = match sender.put(&req, *route, None, frame.body(), producer) {
        Ok(stored) => stored,
        Err(e) => {
            log::debug!("send from {producer} refused: {e}");
            let refusal = json_reply(e.code(), h.opaque, Some(&e.to_string()), &[]);
            hub.rpc_done(h.code, e.code(), arrived_at.elapsed());
            if !h.is_oneway() {
                replies.extend_from_slice(&refusal);
            }
            return Outcome::Served;
        }
    };
    hub.put_done(
        &stored.topic,
        stored.messages,
        stored.wrote_bytes,
        put_started.elapsed(),
    );
    let reply = SendReply {
        code: h.code,
        opaque: h.opaque,
        oneway: h.is_oneway(),
        ext: sender.reply_fields(&stored),
        arrived_at,
    };
    let on_arrival = arrival(hub, &cfg.sender, &stored);
    let mut reply = Some(reply);
    // When the reply waits, the flush thread (then the HA threads) answer, in groups (see
    // `waits`).
    let answer_later = || -> Answer {
        let (hub, conn, reply) = (hub.clone(), conn.clone(), reply.take());
        Box::new(move |code, replies: &mut Replies| {
            if let Some(reply) = reply {
                reply.append_for(&hub, &conn, code, replies);
            }
        })
    };
    if let Some(code) = sender.settle(&stored, on_arrival, answer_later) {
        if let Some(reply) = reply.take() {
            reply.append_to(hub, replies, code);
        }
    }
    Outcome::Served
}

/// What runs once a stored message may be read: the slaves are told, held pulls woken, Python
/// told of the arrival (its held pops, its timer wheel for the schedule topic), also in each
/// light message queue the message was dispatched to (queue 0, an LMQ's only one).
fn arrival(hub: &Arc<Hub>, sender: &Arc<Sender>, stored: &Stored) -> Box<dyn FnOnce() + Send> {
    let (hub, sender) = (hub.clone(), sender.clone());
    let Stored {
        topic,
        queue_id,
        next_offset,
        tags_code,
        lmq_arrivals,
        ..
    } = stored.clone();
    Box::new(move || {
        if let Some(ha) = &sender.settings.ha {
            ha.notify_appended();
        }
        let wake = topic == SCHEDULE_TOPIC;
        pull::arrived(&hub, topic, queue_id, next_offset, tags_code, wake);
        for (lmq, next) in lmq_arrivals {
            pull::arrived_lmq(&hub, lmq, next, tags_code);
        }
    })
}

/// The plane's sends, for another front of the same broker (the gRPC front): the topics the
/// plane may store into without asking Python, and a send stored by the same rules, counted in
/// the same statistics and waking the same pulls as one served on a remoting connection.
#[derive(Clone)]
pub struct SendPort {
    pub(crate) hub: Arc<Hub>,
    pub(crate) config: Arc<std::sync::RwLock<Option<Arc<SendConfig>>>>,
}

impl std::fmt::Debug for SendPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendPort").finish_non_exhaustive()
    }
}

impl SendPort {
    /// What the plane serves now; None when every send goes to Python.
    pub fn config(&self) -> Option<Arc<SendConfig>> {
        self.config.read().unwrap().clone()
    }

    /// Stores `req` by `cfg`'s rules into a topic `cfg` lists (`route`); `answered` gets the
    /// reply's code, now or once the disk or a slave has the message (see `Sender::settle`).
    pub fn put(
        &self,
        cfg: &SendConfig,
        req: &SendRequest<'_>,
        route: TopicRoute,
        body: &[u8],
        producer: SocketAddr,
        answered: Box<dyn FnOnce(i32) + Send>,
    ) -> Result<Stored, SendError> {
        let put_started = Instant::now();
        let stored = cfg.sender.put(req, route, None, body, producer)?;
        self.hub.put_done(
            &stored.topic,
            stored.messages,
            stored.wrote_bytes,
            put_started.elapsed(),
        );
        let on_arrival = arrival(&self.hub, &cfg.sender, &stored);
        let mut answered = Some(answered);
        let now = cfg.sender.settle(&stored, on_arrival, || {
            let answered = answered.take().expect("settle asks for one answer");
            Box::new(move |code, _| answered(code))
        });
        if let (Some(code), Some(answered)) = (now, answered) {
            answered(code);
        }
        Ok(stored)
    }
}

struct SendReply {
    code: i32,
    opaque: i32,
    oneway: bool,
    /// msgId, queueId, queueOffset, MSG_REGION, TRACE_ON.
    ext: Vec<(&'static str, String)>,
    arrived_at: Instant,
}

impl SendReply {
    /// Adds the reply to the replies released with it for its connection.
    fn append_for(self, hub: &Hub, conn: &Arc<Conn>, code: i32, replies: &mut Replies) {
        let out = &mut replies
            .entry(conn.id)
            .or_insert_with(|| (conn.clone(), Vec::new()))
            .1;
        self.append_to(hub, out, code);
    }

    /// Adds the reply to `out` (the replies of one read go out in one write).
    fn append_to(self, hub: &Hub, out: &mut Vec<u8>, code: i32) {
        hub.rpc_done(self.code, code, self.arrived_at.elapsed());
        if self.oneway {
            return;
        }
        let fields: Vec<(&str, &str)> = self
            .ext
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        let frame = json_reply(code, self.opaque, None, &fields);
        out.extend_from_slice(&frame);
    }
}
