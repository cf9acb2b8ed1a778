//! POP_MESSAGE, ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME served on the data plane's threads,
//! by the rules of [`crate::popper`] (Python's pops and acks run the same code).
//!
//! Python says whether pops may be served here (the pull snapshot's `pop`: a master whose timer
//! wheel is on and whose revive topic exists). A request this path is not sure of goes to Python
//! whole: an orderly pop or ack, an SQL92 filter, a group or topic it does not know, a header it
//! cannot read. A pop that found nothing and may wait waits here ([`HeldPop`], on the plane's
//! `PopWaits`) until a message is stored in its topic or retry topics, and pops again. What the
//! rules refuse is answered here with Java's code and remark.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferromq_store::PutResult;

use crate::conn::Conn;
use crate::hub::{Event, Hub, Outcome};
pub use crate::pop_waits::{PopWait, MAX_WAITING_POPS};
use crate::popper::{
    pop_topics, ExtraInfo, PopError, PopRequest, Popped, Receipted, Topics, MAX_POP_NUMS,
};
use crate::pull::{self, PullConfig};
use crate::tags::TagFilter;
use ferromq_remoting::codes::{
    ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, POLLING_TIMEOUT, POP_MESSAGE, SUCCESS,
};
use ferromq_remoting::frame::{json_reply, json_reply_with_body, Frame, Header};

/// A pop whose born time lies further back than its poll time plus this is refused (Python
/// answers it).
const BORN_TIME_SLACK_MS: i64 = 500;

type Ext<'a> = HashMap<&'a str, String>;

fn num<T: std::str::FromStr>(ext: &Ext<'_>, name: &str, default: Option<T>) -> Option<T> {
    match ext.get(name).filter(|v| !v.is_empty()) {
        Some(v) => v.parse().ok(),
        None => default,
    }
}

fn text<'e>(ext: &'e Ext<'_>, name: &str) -> Option<&'e str> {
    ext.get(name).map(String::as_str).filter(|v| !v.is_empty())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The readable topics of the snapshot (the rules ask for read queue counts).
struct Readable<'a>(&'a PullConfig);

impl Topics for Readable<'_> {
    fn read_queues(&self, topic: &str) -> Option<i32> {
        self.0.topics.get(topic).copied()
    }
}

/// A checkpoint or ack the rules stored: held pulls and Python (the timer enqueues it) learn.
fn stored(hub: &Arc<Hub>) -> impl FnMut(&PutResult) + '_ {
    move |r: &PutResult| {
        let tags = Some(r.tags_code);
        pull::arrived(
            hub,
            r.topic.clone(),
            r.queue_id,
            r.queue_offset + 1,
            tags,
            false,
        );
    }
}

/// The ext fields of a request this path may serve (JSON strings when the ACL checks them).
fn ext_of<'h>(cfg: &PullConfig, h: &'h Header<'_>) -> Option<Ext<'h>> {
    if h.is_oneway() {
        return None;
    }
    h.ext_fields(cfg.acl.is_some())
}

/// Whether the ACL (when on) lets this connection's request for `topic` and `group` be served
/// here.
fn acl_allows(cfg: &PullConfig, conn: &Conn, ext: &Ext<'_>, topic: &str, group: &str) -> bool {
    cfg.acl
        .as_ref()
        .is_none_or(|acl| acl.allows_pull(conn.peer_acl().as_deref(), ext, topic, group))
}

/// Whether the snapshot serves pops of `group` on `topic`'s queue `queue_id` (-1: every queue):
/// a group and a readable topic it knows, a queue below the topic's read queue count.
fn serves(cfg: &PullConfig, group: &str, topic: &str, queue_id: i32) -> bool {
    cfg.groups.contains(group)
        && cfg
            .topics
            .get(topic)
            .is_some_and(|read_queues| queue_id < *read_queues)
}

/// Where the plane's pull snapshot lives (Python replaces it as topics, groups and roles change).
pub(crate) type LiveConfig = Arc<RwLock<Option<Arc<PullConfig>>>>;

#[allow(clippy::too_many_arguments)]
pub(crate) fn serve_pop(
    hub: &Arc<Hub>,
    cfg: &Arc<PullConfig>,
    live: &LiveConfig,
    conn: &Arc<Conn>,
    frame: &Frame<'_>,
    h: &Header<'_>,
    arrived_at: Instant,
    replies: &mut Vec<u8>,
) -> Outcome {
    let Some(popper) = &cfg.pop else {
        return Outcome::Forward;
    };
    let Some(ext) = ext_of(cfg, h) else {
        return Outcome::Forward;
    };
    let (Some(group), Some(topic)) = (text(&ext, "consumerGroup"), text(&ext, "topic")) else {
        return Outcome::Forward;
    };
    let order = text(&ext, "order").is_some_and(|o| o.eq_ignore_ascii_case("true"));
    let exp_type = text(&ext, "expType").unwrap_or("TAG");
    let read = (
        num::<i32>(&ext, "queueId", None),
        num::<i32>(&ext, "maxMsgNums", None),
        num::<i64>(&ext, "invisibleTime", None),
        num::<i64>(&ext, "pollTime", Some(0)),
        num::<i64>(&ext, "bornTime", Some(0)),
        num::<i32>(&ext, "initMode", Some(1)),
    );
    let (Some(queue_id), Some(max_msgs), Some(invisible), Some(poll), Some(born), Some(init)) =
        read
    else {
        return Outcome::Forward;
    };
    let now = now_ms();
    let born = if born > 0 { born } else { now };
    if order
        || !exp_type.eq_ignore_ascii_case("TAG")
        || now - born - poll > BORN_TIME_SLACK_MS
        || max_msgs as usize > MAX_POP_NUMS
        || !serves(cfg, group, topic, queue_id)
        || !acl_allows(cfg, conn, &ext, topic, group)
    {
        return Outcome::Forward;
    }
    let Some(filter) = TagFilter::parse(text(&ext, "exp").unwrap_or("*")) else {
        return Outcome::Forward;
    };
    let req = PopRequest {
        group,
        topic,
        queue_id: queue_id.max(-1),
        max_msgs: max_msgs.max(1) as usize,
        invisible_time: invisible,
        init_mode: init,
        filter: &filter,
        order: false,
        blocked: &[],
        priority_factor: cfg.priority_factor(topic, group),
    };
    // Counted from the broker's clock: a client clock ahead does not stretch the wait.
    let wait = poll - (now - born).max(0);
    // Registered before the look: a message stored from now on ends the wait.
    let waiter = (wait > 0)
        .then(|| hub.pop_waits.register(pop_topics(topic, group)))
        .flatten();
    let popped = match popper.pop(&req, &Readable(cfg), None, &mut stored(hub)) {
        Ok(popped) => popped,
        Err(e) => return refused(hub, POP_MESSAGE, h, &e, arrived_at, replies),
    };
    if popped.count == 0 && wait > 0 && waiter.is_none() {
        return Outcome::Forward; // past the plane's bound (`MAX_WAITING_POPS`): Python holds it
    }
    if let (0, Some(waiter)) = (popped.count, waiter) {
        let held = HeldPop {
            conn: conn.clone(),
            frame: frame.bytes.to_vec(),
            opaque: h.opaque,
            group: group.to_string(),
            topic: topic.to_string(),
            queue_id: req.queue_id,
            max_msgs: req.max_msgs,
            invisible,
            init_mode: init,
            filter,
            deadline: Instant::now() + Duration::from_millis(wait as u64),
            arrived_at,
        };
        let (hub2, live) = (hub.clone(), live.clone());
        hub.spawn(async move { held.wait(&hub2, &live, waiter).await });
        return Outcome::Served;
    }
    append_pop_reply(replies, h.opaque, &popped);
    hub.rpc_done(POP_MESSAGE, pop_code(&popped), arrived_at.elapsed());
    Outcome::Served
}

/// A pop that found nothing, waiting on the plane until a message is stored in its topic or
/// retry topics (by the plane or by Python) or its poll time is over, as Python's `wait_for_pop`
/// waits: then it pops again, by the rules in force.
struct HeldPop {
    conn: Arc<Conn>,
    /// The request, for Python when the plane no longer serves its pops.
    frame: Vec<u8>,
    opaque: i32,
    group: String,
    topic: String,
    queue_id: i32,
    max_msgs: usize,
    invisible: i64,
    init_mode: i32,
    filter: TagFilter,
    deadline: Instant,
    arrived_at: Instant,
}

impl HeldPop {
    async fn wait(self, hub: &Arc<Hub>, live: &LiveConfig, waiter: PopWait) {
        loop {
            // With less than the last look's margin left, this pops once more at once.
            waiter.look_again(self.deadline).await;
            if self.conn.is_killed() || hub.is_stopping() {
                return;
            }
            // A peer that has not taken its replies gets no messages popped for it meanwhile.
            if self.conn.over_reply_bound() && !self.conn.until_drained().await {
                return;
            }
            let cfg = live.read().unwrap().clone();
            let served = cfg.filter(|c| serves(c, &self.group, &self.topic, self.queue_id));
            let Some((cfg, popper)) = served.and_then(|c| c.pop.clone().map(|p| (c, p))) else {
                // Python's now (pops off, a slave, the group or topic gone): it answers.
                let bytes = self.frame;
                hub.push(Event::Data {
                    conn: self.conn.id,
                    bytes,
                });
                return;
            };
            let req = PopRequest {
                group: &self.group,
                topic: &self.topic,
                queue_id: self.queue_id,
                max_msgs: self.max_msgs,
                invisible_time: self.invisible,
                init_mode: self.init_mode,
                filter: &self.filter,
                order: false,
                blocked: &[],
                priority_factor: cfg.priority_factor(&self.topic, &self.group),
            };
            let mut reply = Vec::new();
            let code = match popper.pop(&req, &Readable(&cfg), None, &mut stored(hub)) {
                Ok(popped) if popped.count == 0 && PopWait::more_looks(self.deadline) => continue,
                Ok(popped) => {
                    append_pop_reply(&mut reply, self.opaque, &popped);
                    pop_code(&popped)
                }
                Err(e) => {
                    reply.extend_from_slice(&json_reply(e.code, self.opaque, Some(&e.remark), &[]));
                    e.code
                }
            };
            hub.rpc_done(POP_MESSAGE, code, self.arrived_at.elapsed());
            self.conn.write(reply);
            return;
        }
    }
}

fn pop_code(popped: &Popped) -> i32 {
    if popped.count > 0 {
        SUCCESS
    } else {
        POLLING_TIMEOUT
    }
}

/// The answer to a pop, as PopMessageProcessor gives it.
fn append_pop_reply(out: &mut Vec<u8>, opaque: i32, popped: &Popped) {
    let (pop_time, invisible, revive_qid, rest) = (
        popped.pop_time.to_string(),
        popped.invisible_time.to_string(),
        popped.revive_qid.to_string(),
        popped.rest.to_string(),
    );
    let (starts, msgs) = (popped.start_offset_info(), popped.msg_offset_info());
    let fields = [
        ("popTime", pop_time.as_str()),
        ("invisibleTime", invisible.as_str()),
        ("reviveQid", revive_qid.as_str()),
        ("restNum", rest.as_str()),
        ("startOffsetInfo", starts.as_str()),
        ("msgOffsetInfo", msgs.as_str()),
    ];
    let remark = if popped.count > 0 {
        "FOUND"
    } else {
        "NO_MESSAGE_IN_QUEUE"
    };
    json_reply_with_body(
        out,
        pop_code(popped),
        opaque,
        Some(remark),
        &fields,
        &popped.body,
    );
}

/// A refusal of the rules, answered with Java's code and remark (not sent to Python: the
/// rules may have stored part of what they do).
fn refused(
    hub: &Arc<Hub>,
    request: i32,
    h: &Header<'_>,
    e: &PopError,
    arrived_at: Instant,
    replies: &mut Vec<u8>,
) -> Outcome {
    replies.extend_from_slice(&json_reply(e.code, h.opaque, Some(&e.remark), &[]));
    hub.rpc_done(request, e.code, arrived_at.elapsed());
    Outcome::Served
}

/// The fields an ack and a change of invisible time share, or None (Python answers).
fn receipted<'e>(ext: &'e Ext<'_>) -> Option<Receipted<'e>> {
    let receipt = ExtraInfo::parse(text(ext, "extraInfo")?)?;
    if receipt.orderly() {
        return None; // the order information is Python's
    }
    Some(Receipted {
        group: text(ext, "consumerGroup")?,
        topic: text(ext, "topic")?,
        queue_id: num(ext, "queueId", None)?,
        offset: num(ext, "offset", None)?,
        receipt,
    })
}

pub(crate) fn serve_ack(
    hub: &Arc<Hub>,
    cfg: &Arc<PullConfig>,
    conn: &Arc<Conn>,
    h: &Header<'_>,
    arrived_at: Instant,
    replies: &mut Vec<u8>,
) -> Outcome {
    let Some(popper) = &cfg.pop else {
        return Outcome::Forward;
    };
    let Some(ext) = ext_of(cfg, h) else {
        return Outcome::Forward;
    };
    let Some(a) = receipted(&ext).filter(|a| acl_allows(cfg, conn, &ext, a.topic, a.group)) else {
        return Outcome::Forward;
    };
    let topics = Readable(cfg);
    let acked = popper.ack(&topics, &a, &mut stored(hub));
    if let Err(e) = acked {
        return refused(hub, ACK_MESSAGE, h, &e, arrived_at, replies);
    }
    replies.extend_from_slice(&json_reply(SUCCESS, h.opaque, None, &[]));
    hub.rpc_done(ACK_MESSAGE, SUCCESS, arrived_at.elapsed());
    Outcome::Served
}

pub(crate) fn serve_change_invisible(
    hub: &Arc<Hub>,
    cfg: &Arc<PullConfig>,
    conn: &Arc<Conn>,
    h: &Header<'_>,
    arrived_at: Instant,
    replies: &mut Vec<u8>,
) -> Outcome {
    let Some(popper) = &cfg.pop else {
        return Outcome::Forward;
    };
    let Some(ext) = ext_of(cfg, h) else {
        return Outcome::Forward;
    };
    let Some(a) = receipted(&ext).filter(|a| acl_allows(cfg, conn, &ext, a.topic, a.group)) else {
        return Outcome::Forward;
    };
    let Some(invisible) = num::<i64>(&ext, "invisibleTime", None) else {
        return Outcome::Forward;
    };
    let topics = Readable(cfg);
    let changed = popper.change_invisible(&topics, &a, invisible, &mut stored(hub));
    let (pop_time, invisible, revive_qid) = match changed {
        Ok(changed) => changed,
        Err(e) => {
            let code = CHANGE_MESSAGE_INVISIBLETIME;
            return refused(hub, code, h, &e, arrived_at, replies);
        }
    };
    let (p, i, r) = (
        pop_time.to_string(),
        invisible.to_string(),
        revive_qid.to_string(),
    );
    let fields = [
        ("popTime", p.as_str()),
        ("invisibleTime", i.as_str()),
        ("reviveQid", r.as_str()),
    ];
    replies.extend_from_slice(&json_reply(SUCCESS, h.opaque, None, &fields));
    hub.rpc_done(CHANGE_MESSAGE_INVISIBLETIME, SUCCESS, arrived_at.elapsed());
    Outcome::Served
}

/// The plane's pops and acks, for another front of the same broker (the gRPC front): the same
/// topics, groups and rules, and the same wake-ups for what they store, as the pops served on a
/// remoting connection.
#[derive(Clone)]
pub struct PopPort {
    pub(crate) hub: Arc<Hub>,
    pub(crate) config: Arc<std::sync::RwLock<Option<Arc<PullConfig>>>>,
}

impl std::fmt::Debug for PopPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PopPort").finish_non_exhaustive()
    }
}

impl PopPort {
    /// What the plane serves now, when it serves pops (with the ACL on, the gRPC front serves
    /// only calls its rules allow: `cfg.acl`).
    pub fn config(&self) -> Option<Arc<PullConfig>> {
        let cfg = self.config.read().unwrap().clone()?;
        cfg.pop.is_some().then_some(cfg)
    }

    /// Waits for a message stored in `topics` (a pop's topic and its retry topics) from now
    /// until the returned wait is dropped; register it before the pop that looks. None when
    /// `MAX_WAITING_POPS` wait already (the pop is then Python's).
    pub fn wait(&self, topics: Vec<String>) -> Option<PopWait> {
        self.hub.pop_waits.register(topics)
    }

    /// A pop by `cfg`'s rules; None when `cfg` does not serve it (an unknown group or topic, an
    /// orderly pop: Python's to decide).
    pub fn pop(&self, cfg: &PullConfig, req: &PopRequest<'_>) -> Option<Result<Popped, PopError>> {
        let popper = cfg.pop.as_ref()?;
        if req.order || !serves(cfg, req.group, req.topic, req.queue_id) {
            return None;
        }
        Some(popper.pop(req, &Readable(cfg), None, &mut stored(&self.hub)))
    }

    /// An ack by `cfg`'s rules; None when `cfg` does not serve it (an orderly receipt).
    pub fn ack(&self, cfg: &PullConfig, a: &Receipted<'_>) -> Option<Result<(), PopError>> {
        let popper = cfg.pop.as_ref()?;
        if a.receipt.orderly() {
            return None;
        }
        Some(popper.ack(&Readable(cfg), a, &mut stored(&self.hub)))
    }
}
