//! ReceiveMessage and AckMessage served by the front itself, on the broker's data plane
//! ([`PopPort`]): a simple consumer's pop that finds messages, by the POP rules a remoting pop is
//! served with, its records made 5.x messages by [`convert::to_v2`]; its acks by the same rules.
//!
//! Python decides which clients are served here ([`Receives::serve_client`]: the simple
//! consumers whose settings it knows, FIFO ones excluded) and what a message past its retry
//! policy becomes ([`DeadLetters`]). A pop that finds nothing waits here (long polling, on
//! [`PopPort::wait`]) until a message is stored in its topic or retry topics, by the plane or by
//! Python, then pops again. Whatever else is Python's is handed on to grpcio whole, before
//! anything is popped or acked: a client it did not name, automatic renewal (a push consumer's),
//! an SQL92 filter, an invisible time or polling deadline the proxy refuses, a receive without a
//! long polling timeout that finds nothing, a topic or group the plane does not serve, an orderly
//! or unreadable receipt.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferromq_broker::popper::{
    pop_topics, real_topic, retry_mark, split_records, ExtraInfo, PopError, PopRequest, Receipted,
    MAX_POP_NUMS,
};
use ferromq_broker::pull::TagFilter;
use ferromq_broker::{PopPort, SendPort};
use ferromq_remoting::codes::{
    REQUEST_CODE_NOT_SUPPORTED, SUBSCRIPTION_GROUP_NOT_EXIST, SYSTEM_BUSY, TOPIC_NOT_EXIST,
};
use ferromq_store::message::RecordView;
use http::{HeaderMap, Request};
use hyper::body::Incoming;

use crate::body::{CallBody, Handled};
use crate::call::{self, status};
use crate::convert::{self, code, PROXY_EXCEPTION};
use crate::proto::{
    AckMessageRequest, AckMessageResponse, AckMessageResultEntry, ReceiveMessageRequest,
    ReceiveMessageResponse, Received, Status,
};

pub const RECEIVE_MESSAGE: &str = "/apache.rocketmq.v2.MessagingService/ReceiveMessage";
pub const ACK_MESSAGE: &str = "/apache.rocketmq.v2.MessagingService/AckMessage";

/// A call with less time left than this is Python's (the proxy refuses it).
const MIN_POLLING: Duration = Duration::from_millis(convert::MIN_POLLING_MS as u64);
/// The proxy's refusal of a receipt whose message is visible again.
pub const EXPIRED: &str = "receipt handle is expired";

/// A popped message past its consumer's retry policy: Python moves it to the group's dead
/// letter queue and acks it (the proxy does so instead of delivering it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub group: String,
    /// Where the message lies (its retry topic, for a retried message).
    pub topic: String,
    pub receipt: String,
    pub commit_log_offset: i64,
    pub message_id: String,
}

/// Where dead letters go (the binding hands them to Python's event loop).
pub type DeadLetters = Box<dyn Fn(DeadLetter) + Send + Sync>;

/// The receives and acks of one broker's front.
pub struct Receives {
    pops: PopPort,
    /// The plane's send topics: the topics a 5.x client may name (well formed, not a system
    /// topic); a receive of another is Python's.
    sends: SendPort,
    /// Clients served here, with their retry policy's delivery attempts (0: none known).
    clients: Mutex<HashMap<String, i32>>,
    dead_letters: DeadLetters,
    answered: AtomicU64,
}

impl Receives {
    pub fn new(pops: PopPort, sends: SendPort, dead_letters: DeadLetters) -> Receives {
        Receives {
            pops,
            sends,
            clients: Mutex::new(HashMap::new()),
            dead_letters,
            answered: AtomicU64::new(0),
        }
    }

    /// From now on the receives and acks of `client_id` are served here.
    pub fn serve_client(&self, client_id: &str, max_attempts: i32) {
        self.clients
            .lock()
            .unwrap()
            .insert(client_id.to_string(), max_attempts);
    }

    /// The receives and acks of `client_id` go to Python from now on.
    pub fn forget_client(&self, client_id: &str) {
        self.clients.lock().unwrap().remove(client_id);
    }

    /// ReceiveMessage and AckMessage calls answered here so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// The client's retry policy's attempts, when its calls are served here.
    fn served(&self, headers: &HeaderMap) -> Option<i32> {
        let client = call::client_id(headers)?;
        self.clients.lock().unwrap().get(client).copied()
    }

    /// Serves a ReceiveMessage call, or declines it.
    pub async fn receive(&self, req: Request<Incoming>) -> Handled {
        let handled = self.try_receive(req).await;
        self.count(&handled);
        handled
    }

    /// Serves an AckMessage call, or declines it.
    pub async fn ack(&self, req: Request<Incoming>) -> Handled {
        let handled = self.try_ack(req).await;
        self.count(&handled);
        handled
    }

    fn count(&self, handled: &Handled) {
        if matches!(handled, Handled::Answered(_)) {
            self.answered.fetch_add(1, Ordering::Relaxed);
        }
    }

    async fn try_receive(&self, req: Request<Incoming>) -> Handled {
        let served = (|| {
            let max_attempts = self.served(req.headers())?;
            let cfg = self.pops.config()?;
            let sends = self.sends.config()?;
            let deadline_ok = call::timeout(req.headers()).is_none_or(|t| t >= MIN_POLLING);
            (call::plain_call(req.headers()) && deadline_ok).then_some((max_attempts, cfg, sends))
        })();
        let Some((max_attempts, cfg, sends)) = served else {
            return Handled::Declined(req.map(CallBody::streamed));
        };
        let (parts, read, request, _held) = match call::read::<ReceiveMessageRequest>(req).await {
            Ok(decoded) => decoded,
            Err(handled) => return handled,
        };
        let group = request.group.as_ref().map_or("", |g| g.name.as_str());
        let queue = request.message_queue.as_ref();
        let topic = queue
            .and_then(|q| q.topic.as_ref())
            .map_or("", |t| t.name.as_str());
        let invisible = request
            .invisible_duration
            .as_ref()
            .map_or(0, |d| d.millis());
        let filter = request.filter_expression.clone().unwrap_or_default();
        let expression = if filter.expression.is_empty() {
            "*"
        } else {
            filter.expression.as_str()
        };
        let tags = (filter.r#type != crate::proto::SQL)
            .then(|| TagFilter::parse(expression))
            .flatten();
        let ours = call::acl_allows(cfg.acl.as_ref(), &parts.headers, topic, Some(group))
            && !request.auto_renew
            && convert::check_invisible(invisible, convert::MIN_RECEIVE_INVISIBLE_MS).is_ok()
            && convert::check_topic(topic).is_ok()
            && sends.topics.contains_key(topic)
            && convert::check_group(group).is_ok();
        let (true, Some(tags)) = (ours, tags) else {
            return call::decline(parts, read);
        };
        let pop = PopRequest {
            group,
            topic,
            queue_id: -1,
            max_msgs: (request.batch_size.max(1) as usize).min(MAX_POP_NUMS),
            invisible_time: invisible,
            init_mode: 1,
            filter: &tags,
            order: false,
            blocked: &[],
            priority_factor: cfg.priority_factor(topic, group),
        };
        // Without a long polling timeout the client's request timeout counts, which Python knows.
        let remaining = call::timeout(&parts.headers).map(|d| d.as_millis() as i64);
        let deadline = request.long_polling_timeout.as_ref().and_then(|d| {
            let ms = convert::polling_time(Some(d.millis()), None, remaining).ok()?;
            Some(Instant::now() + Duration::from_millis(ms as u64))
        });
        // Registered before the first look: a message stored from now on ends the wait.
        let wait = deadline.and_then(|_| self.pops.wait(pop_topics(topic, group)));
        let mut cfg = cfg;
        let popped = loop {
            match self.pops.pop(&cfg, &pop) {
                Some(Ok(popped)) if popped.count > 0 => break popped,
                Some(Ok(_)) => {}
                // Python's to decide now (the topic or group is no longer served here).
                None => return call::decline(parts, read),
                Some(Err(e)) => {
                    return Handled::Answered(call::grpc_reply(&[
                        received(Received::Status(refusal(&e))),
                        delivered_now(),
                    ]))
                }
            }
            // Nothing: long polling, as Python's pops wait (`wait_for_pop`), until a message
            // is stored in the topic or its retry topics, or the polling time is over.
            let (Some(deadline), Some(wait)) = (deadline, wait.as_ref()) else {
                // No polling time (Python computes it), or `MAX_WAITING_POPS` wait already.
                return call::decline(parts, read);
            };
            if !wait.look_again(deadline).await {
                return Handled::Answered(call::grpc_reply(&[
                    received(Received::Status(status(
                        code::MESSAGE_NOT_FOUND,
                        "no new message",
                    ))),
                    delivered_now(),
                ]));
            }
            // The rules may have changed meanwhile (a user's ACL, the topic's route).
            match self.pops.config() {
                Some(now)
                    if call::acl_allows(now.acl.as_ref(), &parts.headers, topic, Some(group)) =>
                {
                    cfg = now
                }
                _ => return call::decline(parts, read),
            }
        };
        drop(wait);
        let broker_name = self.pops_broker_name(&cfg);
        let fields = convert::PopFields {
            pop_time: popped.pop_time,
            invisible_time: popped.invisible_time,
            revive_qid: popped.revive_qid,
            broker_name: &broker_name,
        };
        let mut messages = Vec::with_capacity(popped.count);
        for record in split_records(&popped.body) {
            let Ok(view) = RecordView::parse(record, false) else {
                continue;
            };
            let (handle, receipt) = convert::receipt_handle(&view, &fields, |queue_id| {
                popped
                    .takes
                    .iter()
                    .find(|t| retry_mark(&t.topic) == "0" && t.queue_id == queue_id)
                    .map(|t| t.start_offset)
            });
            let message = convert::to_v2(&view, topic, Some(handle));
            let attempt = view.reconsume_times.saturating_add(1);
            if max_attempts > 0 && attempt > max_attempts {
                let mark = ExtraInfo::parse(&receipt).map_or_else(|| "0".into(), |r| r.mark);
                (self.dead_letters)(DeadLetter {
                    group: group.to_string(),
                    topic: real_topic(topic, group, &mark),
                    receipt,
                    commit_log_offset: view.physical_offset,
                    message_id: message
                        .system_properties
                        .as_ref()
                        .map(|sp| sp.message_id.clone())
                        .unwrap_or_default(),
                });
                continue;
            }
            messages.push(received(Received::Message(message)));
        }
        let mut stream = Vec::with_capacity(messages.len() + 2);
        if messages.is_empty() {
            stream.push(received(Received::Status(status(
                code::MESSAGE_NOT_FOUND,
                "no match message",
            ))));
        } else {
            stream.push(received(Received::Status(status(code::OK, "OK"))));
            stream.append(&mut messages);
        }
        stream.push(delivered_now());
        Handled::Answered(call::grpc_reply(&stream))
    }

    /// The broker's name in receipts (the popper's settings).
    fn pops_broker_name(&self, cfg: &ferromq_broker::PullConfig) -> String {
        cfg.pop
            .as_ref()
            .map(|p| p.settings().broker_name.clone())
            .unwrap_or_default()
    }

    async fn try_ack(&self, req: Request<Incoming>) -> Handled {
        let served = (|| {
            self.served(req.headers())?;
            let cfg = self.pops.config()?;
            let sends = self.sends.config()?;
            call::plain_call(req.headers()).then_some((cfg, sends))
        })();
        let Some((cfg, sends)) = served else {
            return Handled::Declined(req.map(CallBody::streamed));
        };
        let (parts, read, request, _held) = match call::read::<AckMessageRequest>(req).await {
            Ok(decoded) => decoded,
            Err(handled) => return handled,
        };
        let group = request.group.as_ref().map_or("", |g| g.name.as_str());
        let topic = request.topic.as_ref().map_or("", |t| t.name.as_str());
        let receipts: Option<Vec<(ExtraInfo, &str)>> = request
            .entries
            .iter()
            .map(|e| {
                // The receipt's eight fields (the message's CommitLog offset follows).
                let receipt = ExtraInfo::parse(&e.receipt_handle).filter(|r| !r.orderly())?;
                Some((receipt, e.message_id.as_str()))
            })
            .collect();
        let ours = call::acl_allows(cfg.acl.as_ref(), &parts.headers, topic, Some(group))
            && !request.entries.is_empty()
            && convert::check_topic(topic).is_ok()
            && sends.topics.contains_key(topic)
            && convert::check_group(group).is_ok();
        let (true, Some(receipts)) = (ours, receipts) else {
            return call::decline(parts, read);
        };
        let mut entries = Vec::with_capacity(receipts.len());
        let now = call::now_ms();
        for ((receipt, message_id), entry) in receipts.into_iter().zip(&request.entries) {
            if receipt.expired(now) {
                entries.push(AckMessageResultEntry {
                    message_id: message_id.to_string(),
                    receipt_handle: entry.receipt_handle.clone(),
                    status: Some(status(code::INVALID_RECEIPT_HANDLE, EXPIRED)),
                });
                continue;
            }
            let where_ = real_topic(topic, group, &receipt.mark);
            let a = Receipted {
                group,
                topic: &where_,
                queue_id: receipt.queue_id,
                offset: receipt.offset,
                receipt,
            };
            let result = match self.pops.ack(&cfg, &a) {
                Some(Ok(())) => status(code::OK, "OK"),
                Some(Err(e)) => refusal(&e),
                None => return call::decline(parts, read),
            };
            entries.push(AckMessageResultEntry {
                message_id: message_id.to_string(),
                receipt_handle: entry.receipt_handle.clone(),
                status: Some(result),
            });
        }
        let overall = call::overall_status(
            entries
                .iter()
                .map(|e| e.status.as_ref().map_or(0, |s| s.code)),
        );
        Handled::Answered(call::grpc_reply(&[AckMessageResponse {
            status: Some(overall),
            entries,
        }]))
    }
}

fn received(content: Received) -> ReceiveMessageResponse {
    ReceiveMessageResponse {
        content: Some(content),
    }
}

/// The stream's last message: when the server answered.
fn delivered_now() -> ReceiveMessageResponse {
    received(Received::DeliveryTimestamp(convert::timestamp(
        call::now_ms(),
    )))
}

/// A refusal of the POP rules as the proxy maps a broker's answer (`ResponseBuilder.buildCode`).
fn refusal(e: &PopError) -> Status {
    match e.code {
        SYSTEM_BUSY => status(code::TOO_MANY_REQUESTS, &e.remark),
        REQUEST_CODE_NOT_SUPPORTED => status(code::NOT_IMPLEMENTED, &e.remark),
        SUBSCRIPTION_GROUP_NOT_EXIST => status(code::CONSUMER_GROUP_NOT_FOUND, &e.remark),
        TOPIC_NOT_EXIST => status(code::TOPIC_NOT_FOUND, &e.remark),
        _ => status(
            code::INTERNAL_SERVER_ERROR,
            &format!("{PROXY_EXCEPTION}{}", e.remark),
        ),
    }
}
