//! PULL_MESSAGE served on the data plane's threads, held pulls (long polling) included.
//!
//! Python decides what may be served here and pushes it down as a [`PullConfig`]: the readable
//! topics, the groups that exist and may consume, and the TAG subscriptions consumers registered
//! by heartbeat. A pull this path is not sure of (a topic, group or subscription it does not know,
//! an SQL92 or newer subscription, a header it cannot read, an offset to correct, a store error)
//! goes to Python whole, which answers it as before.
//!
//! A pull that finds nothing new and may wait is held here until a matching message is stored
//! (by a send on the plane, or by Python: [`crate::DataPlane::notify_arrival`]), a periodic
//! re-check finds one, or its suspend time is up; then it reads once more and is answered with
//! whatever it finds. The offsets pulls commit go into the broker's one table of consumer
//! offsets ([`crate::offsets`]); the pull statistics go to Python in batches.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use ferromq_store::lmq::LMQ_QUEUE_ID;
use ferromq_store::{GetResult, GetStatus, MessageStore};

use crate::acl::AclRules;
use crate::conn::Conn;
use crate::holds::Held;
use crate::hub::{Event, Hub, Outcome};
use crate::offsets::ConsumerOffsets;
use crate::popper::Popper;
pub use crate::tags::{parse_tags, NoTags, TagFilter};
use ferromq_remoting::codes::{
    FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION, FLAG_SUSPEND, PULL_MESSAGE, PULL_NOT_FOUND,
    PULL_OFFSET_MOVED, PULL_RETRY_IMMEDIATELY, SUCCESS,
};
use ferromq_remoting::frame::{json_reply_with_body, Frame, Header};

/// Pulls held on the plane at most (each holds its request until answered); past it, a pull
/// that would wait goes to Python, whose in-flight bound stops reading a peer that adds more.
pub const MAX_HELD_PULLS: usize = 10_000;

/// A consumer group's subscription to a topic, as its heartbeats registered it.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub version: i64,
    pub filter: TagFilter,
}

/// What the data plane needs to serve pulls; replaced whole when any of it changes.
pub struct PullConfig {
    pub store: Arc<MessageStore>,
    /// Readable topics and their read queue counts.
    pub topics: HashMap<String, i32>,
    /// Groups that exist and may consume.
    pub groups: HashSet<String>,
    /// group -> topic -> its TAG subscription (SQL92 ones are Python's: not listed).
    pub subscriptions: HashMap<String, HashMap<String, Subscription>>,
    /// None: long polling (a pull waits its suspendTimeoutMillis); Some: short polling's wait.
    pub short_polling: Option<Duration>,
    /// How often held pulls look at their queue's max offset themselves.
    pub check_interval: Duration,
    /// With aclEnable=true: a pull is served here only when these rules (topics the accounts
    /// may subscribe to, groups they may pull as) and the connection's
    /// [`crate::acl::PeerAcl`] allow it.
    pub acl: Option<AclRules>,
    /// The consumer offsets pulls commit into (the broker's one table).
    pub offsets: Arc<ConsumerOffsets>,
    /// Some: pops, acks and changes of invisible time are served here too (see [`crate::pop`]).
    pub pop: Option<Arc<Popper>>,
    /// The readable topics whose `message.type` is PRIORITY (RocketMQ 5.4).
    pub priority_topics: HashSet<String>,
    /// The `priority.factor` of the groups that set one (100 when not set).
    pub priority_factors: HashMap<String, u32>,
}

impl PullConfig {
    /// What a pop of `group` on `topic` gives [`crate::popper::PopRequest::priority_factor`].
    pub fn priority_factor(&self, topic: &str, group: &str) -> Option<u32> {
        self.priority_topics
            .contains(topic)
            .then(|| self.priority_factors.get(group).copied().unwrap_or(100))
    }
}

/// The fields of a PullMessageRequestHeader this path uses, or None when one is missing or does
/// not parse as this path expects (Python answers those).
struct PullRequest<'a> {
    group: &'a str,
    topic: &'a str,
    queue_id: i32,
    offset: i64,
    max_msgs: usize,
    sys_flag: i32,
    commit_offset: i64,
    suspend_ms: i64,
    subscription: Option<&'a str>,
    sub_version: i64,
    expression_type: Option<&'a str>,
}

impl<'a> PullRequest<'a> {
    fn read(ext: &'a HashMap<&str, String>) -> Option<PullRequest<'a>> {
        let text = |k: &str| ext.get(k).map(String::as_str);
        fn num<T: std::str::FromStr>(v: Option<&str>, default: Option<T>) -> Option<T> {
            match v {
                Some(v) => v.parse().ok(),
                None => default,
            }
        }
        let max_msgs: i32 = num(text("maxMsgNums"), Some(32))?;
        Some(PullRequest {
            group: text("consumerGroup")?,
            topic: text("topic")?,
            queue_id: num(text("queueId"), None)?,
            offset: num(text("queueOffset"), None)?,
            max_msgs: max_msgs.max(1) as usize,
            sys_flag: num(text("sysFlag"), Some(0))?,
            commit_offset: num(text("commitOffset"), Some(-1))?,
            suspend_ms: num(text("suspendTimeoutMillis"), Some(15_000))?,
            subscription: text("subscription"),
            sub_version: num(text("subVersion"), Some(0))?,
            expression_type: text("expressionType"),
        })
    }

    /// The tags this pull takes: its own expression (FLAG_SUBSCRIPTION) or the group's.
    fn filter(&self, cfg: &PullConfig) -> Option<TagFilter> {
        if self.sys_flag & FLAG_SUBSCRIPTION != 0 {
            let etype = self.expression_type.filter(|t| !t.is_empty());
            if !etype.is_none_or(|t| t.eq_ignore_ascii_case("TAG")) {
                return None;
            }
            return TagFilter::parse(self.subscription.unwrap_or("*"));
        }
        let sub = cfg.subscriptions.get(self.group)?.get(self.topic)?;
        // An older registration than the consumer's: Python says so (or has the newer one).
        (sub.version >= self.sub_version).then(|| sub.filter.clone())
    }
}

/// PullMessageProcessor's response code for a read at `offset`.
pub fn code_of(status: GetStatus, offset: i64) -> i32 {
    match status {
        GetStatus::Found => SUCCESS,
        GetStatus::NoMatchedMessage | GetStatus::MessageWasRemoving => PULL_RETRY_IMMEDIATELY,
        GetStatus::NoMatchedLogicQueue | GetStatus::NoMessageInQueue if offset == 0 => {
            PULL_NOT_FOUND
        }
        GetStatus::NoMatchedLogicQueue | GetStatus::NoMessageInQueue => PULL_OFFSET_MOVED,
        GetStatus::OffsetFoundNull | GetStatus::OffsetOverflowOne => PULL_NOT_FOUND,
        GetStatus::OffsetOverflowBadly | GetStatus::OffsetTooSmall => PULL_OFFSET_MOVED,
    }
}

pub(crate) fn serve(
    hub: &Arc<Hub>,
    cfg: &Arc<PullConfig>,
    conn: &Arc<Conn>,
    frame: &Frame<'_>,
    h: &Header<'_>,
    arrived_at: Instant,
    replies: &mut Vec<u8>,
) -> Outcome {
    if h.is_oneway() {
        return Outcome::Forward;
    }
    let Some(ext) = h.ext_fields(cfg.acl.is_some()) else {
        return Outcome::Forward;
    };
    let Some(req) = PullRequest::read(&ext) else {
        return Outcome::Forward;
    };
    if let Some(acl) = &cfg.acl {
        if !acl.allows_pull(conn.peer_acl().as_deref(), &ext, req.topic, req.group) {
            return Outcome::Forward;
        }
    }
    if req.queue_id < 0 || req.offset < 0 || !cfg.groups.contains(req.group) {
        return Outcome::Forward;
    }
    if cfg
        .topics
        .get(req.topic)
        .is_none_or(|read_queues| req.queue_id >= *read_queues)
    {
        return Outcome::Forward; // unknown, unreadable, or Python names the illegal queue
    }
    let Some(filter) = req.filter(cfg) else {
        return Outcome::Forward;
    };
    let Ok(result) = cfg.store.pull_messages(
        req.topic,
        req.queue_id,
        req.offset,
        req.max_msgs,
        filter.codes(),
    ) else {
        return Outcome::Forward;
    };
    let code = code_of(result.status, req.offset);
    if code == PULL_OFFSET_MOVED {
        // Python corrects the offset and records the OffsetMovedEvent.
        return Outcome::Forward;
    }
    if req.sys_flag & FLAG_COMMIT_OFFSET != 0 && req.commit_offset >= 0 {
        cfg.offsets
            .commit(req.group, req.topic, req.queue_id, req.commit_offset);
    }
    if code == PULL_NOT_FOUND && req.sys_flag & FLAG_SUSPEND != 0 {
        if hub.holds.len() >= MAX_HELD_PULLS {
            return Outcome::Forward; // Python holds it: its in-flight bound stops the reading
        }
        let wait = cfg
            .short_polling
            .unwrap_or(Duration::from_millis(req.suspend_ms.max(0) as u64));
        hold(
            hub,
            Held {
                conn: conn.clone(),
                frame: frame.bytes.to_vec(),
                opaque: h.opaque,
                group: req.group.to_string(),
                topic: req.topic.to_string(),
                queue_id: req.queue_id,
                offset: req.offset,
                max_msgs: req.max_msgs,
                filter,
                deadline: Instant::now() + wait,
                arrived_at,
                store: cfg.store.clone(),
            },
        );
        return Outcome::Served;
    }
    hub.got(req.group, req.topic, req.queue_id, &result);
    hub.rpc_done(PULL_MESSAGE, code, arrived_at.elapsed());
    append_reply(replies, h.opaque, code, &result);
    Outcome::Served
}

/// A message was stored (by the plane or by Python): held pulls it satisfies are answered, and
/// the pops waiting on its topic look again.
pub(crate) fn wake_held(
    hub: &Arc<Hub>,
    topic: &str,
    queue_id: i32,
    next_offset: i64,
    tags_code: Option<i64>,
) {
    if hub.holds.len() > 0 {
        let woken = hub.holds.arrived(topic, queue_id, next_offset, tags_code);
        answer(hub, woken);
    }
    hub.pop_waits.wake(topic);
}

/// A message the plane stored: held pulls here are answered, and Python is told (its held
/// pulls; with `wake` at once, for delayed delivery).
pub(crate) fn arrived(
    hub: &Arc<Hub>,
    topic: String,
    queue_id: i32,
    next_offset: i64,
    tags_code: Option<i64>,
    wake: bool,
) {
    wake_held(hub, &topic, queue_id, next_offset, tags_code);
    hub.record_arrival(topic, queue_id, next_offset, tags_code, wake);
}

/// A message the plane dispatched into a light message queue (a lite topic's): held pulls of it
/// are answered, and Python is told only while it watches (a lite pop waits there), so lite topics
/// written while nobody waits leave nothing behind in the arrival table, whose entries would
/// otherwise grow with their count. Python catches up on what it was not told when it starts
/// watching again (`LiteConsumers.wait`).
pub(crate) fn arrived_lmq(hub: &Arc<Hub>, name: String, next_offset: i64, tags_code: Option<i64>) {
    wake_held(hub, &name, LMQ_QUEUE_ID, next_offset, tags_code);
    if hub.is_watching() {
        hub.record_arrival(name, LMQ_QUEUE_ID, next_offset, tags_code, false);
    }
}

/// Holds a pull; a message stored between its read and now wakes it at once.
fn hold(hub: &Arc<Hub>, held: Held) {
    let (topic, queue_id, offset) = (held.topic.clone(), held.queue_id, held.offset);
    let store = held.store.clone();
    hub.holds.add(held);
    let max = store.max_offset_in_queue(&topic, queue_id).unwrap_or(0);
    if max > offset {
        let woken = hub.holds.arrived(&topic, queue_id, max, None);
        answer(hub, woken);
    }
}

/// Answers woken pulls: each reads its queue again and gets what it finds. A pull whose peer
/// has not taken the replies before waits for it on its own task (many pulls woken by one large
/// message do not make the plane hold a copy each for a peer that reads nothing).
pub(crate) fn answer(hub: &Arc<Hub>, woken: Vec<Held>) {
    if woken.is_empty() {
        return;
    }
    // Off the plane's threads (the flush thread releasing SYNC_FLUSH sends, Python's): the
    // reads run on the plane.
    if tokio::runtime::Handle::try_current().is_err() {
        let hub2 = hub.clone();
        hub.spawn(async move { answer(&hub2, woken) });
        return;
    }
    for p in woken {
        if p.conn.is_killed() {
            continue;
        }
        if p.conn.over_reply_bound() {
            let hub2 = hub.clone();
            hub.spawn(async move {
                if p.conn.until_drained().await {
                    answer_one(&hub2, p);
                }
            });
        } else {
            answer_one(hub, p);
        }
    }
}

fn answer_one(hub: &Hub, p: Held) {
    let read = p
        .store
        .pull_messages(&p.topic, p.queue_id, p.offset, p.max_msgs, p.filter.codes());
    let result = match read {
        Ok(r) if code_of(r.status, p.offset) != PULL_OFFSET_MOVED => r,
        // Python answers it (an offset to correct, a store that closed meanwhile).
        _ => {
            hub.push(Event::Data {
                conn: p.conn.id,
                bytes: p.frame,
            });
            return;
        }
    };
    let code = code_of(result.status, p.offset);
    hub.got(&p.group, &p.topic, p.queue_id, &result);
    hub.rpc_done(PULL_MESSAGE, code, p.arrived_at.elapsed());
    let mut reply = Vec::new();
    append_reply(&mut reply, p.opaque, code, &result);
    p.conn.write(reply);
}

/// The answer to a pull, as PullMessageProcessor gives it (the body only with SUCCESS).
fn append_reply(out: &mut Vec<u8>, opaque: i32, code: i32, r: &GetResult) {
    let (next, min, max) = (
        r.next_begin_offset.to_string(),
        r.min_offset.to_string(),
        r.max_offset.to_string(),
    );
    let body: &[u8] = if code == SUCCESS { &r.body } else { &[] };
    json_reply_with_body(
        out,
        code,
        opaque,
        Some(r.status.name()),
        &[
            ("suggestWhichBrokerId", "0"),
            ("nextBeginOffset", &next),
            ("minOffset", &min),
            ("maxOffset", &max),
        ],
        body,
    );
}

/// Wakes held pulls past their deadline, and every `check_interval` those whose queue grew
/// (a message stored by a path that told nobody).
pub(crate) async fn hold_loop(hub: Arc<Hub>, config: Arc<RwLock<Option<Arc<PullConfig>>>>) {
    const TICK: Duration = Duration::from_millis(50);
    let mut checked = Instant::now();
    loop {
        if !hub.sleep_or_stop(TICK).await {
            return;
        }
        if hub.holds.len() == 0 {
            continue;
        }
        let now = Instant::now();
        let cfg = config.read().unwrap().clone();
        let check = cfg
            .as_ref()
            .filter(|c| now.duration_since(checked) >= c.check_interval);
        let woken = match check {
            Some(c) => {
                checked = now;
                let max = |topic: &str, queue_id: i32| {
                    c.store.max_offset_in_queue(topic, queue_id).unwrap_or(0)
                };
                hub.holds.due(now, Some(&max))
            }
            None => hub.holds.due(now, None),
        };
        answer(&hub, woken);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_follow_the_pull_processor() {
        assert_eq!(code_of(GetStatus::Found, 5), SUCCESS);
        assert_eq!(code_of(GetStatus::NoMessageInQueue, 0), PULL_NOT_FOUND);
        assert_eq!(code_of(GetStatus::NoMessageInQueue, 3), PULL_OFFSET_MOVED);
        assert_eq!(code_of(GetStatus::OffsetOverflowOne, 3), PULL_NOT_FOUND);
        assert_eq!(
            code_of(GetStatus::NoMatchedMessage, 3),
            PULL_RETRY_IMMEDIATELY
        );
        assert_eq!(code_of(GetStatus::OffsetTooSmall, 0), PULL_OFFSET_MOVED);
    }
}
