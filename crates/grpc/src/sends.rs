//! SendMessage served by the front itself, on the broker's data plane ([`SendPort`]): the rules of
//! [`crate::convert`] (the proxy's checks, properties and types), then the same send rules,
//! statistics and wake-ups as a remoting send served by the plane. Whatever is Python's to
//! decide is handed on to grpcio whole, before anything is stored: a topic the plane does not
//! list (unknown, system, not writable), a transaction (its check-back needs the client's
//! session), the ACL (signatures are checked in Python), a compressed or unusual call.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use ferromq_broker::sender::{MessageType, SendRequest};
use ferromq_broker::{SendConfig, SendPort};
use ferromq_remoting::codes::{
    FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE, SUCCESS,
};
use ferromq_store::message::normalize_host;
use http::{Request, Response};
use hyper::body::Incoming;
use tokio::sync::oneshot;

use crate::body::{CallBody, Handled, ReplyBody};
use crate::call::{self, status};
use crate::convert::{self, code, Refusal, PROXY_EXCEPTION};
use crate::proto::{SendMessageRequest, SendMessageResponse, SendResultEntry};

/// The path of the call served here.
pub const SEND_MESSAGE: &str = "/apache.rocketmq.v2.MessagingService/SendMessage";

/// The sends of one broker's front.
pub struct Sends {
    port: SendPort,
    /// Whose turn it is among a topic's queues (messages without a group, round robin).
    turn: AtomicUsize,
    /// Calls answered here, refusals included.
    answered: AtomicU64,
}

/// A message ready for the store.
struct Planned {
    out: convert::Outgoing,
    queue_id: i32,
    body: Bytes,
    message_id: String,
}

/// What a request comes to before anything is stored.
enum Plan {
    Python,
    Refused(Refusal),
    Store(String, ferromq_broker::TopicRoute, Vec<Planned>),
}

impl Sends {
    pub fn new(port: SendPort) -> Sends {
        Sends {
            port,
            turn: AtomicUsize::new(0),
            answered: AtomicU64::new(0),
        }
    }

    /// SendMessage calls the front answered itself so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Serves a SendMessage call from `peer`, or declines it.
    pub async fn serve(&self, req: Request<Incoming>, peer: SocketAddr) -> Handled {
        let handled = self.try_serve(req, peer).await;
        if matches!(handled, Handled::Answered(_)) {
            self.answered.fetch_add(1, Ordering::Relaxed);
        }
        handled
    }

    async fn try_serve(&self, req: Request<Incoming>, peer: SocketAddr) -> Handled {
        let cfg = match self.port.config() {
            Some(cfg) if call::plain_call(req.headers()) => cfg,
            _ => return Handled::Declined(req.map(CallBody::streamed)),
        };
        let (parts, read, request, _held) = match call::read::<SendMessageRequest>(req).await {
            Ok(decoded) => decoded,
            Err(handled) => return handled,
        };
        let topic = request.messages.first().map_or("", |m| m.topic_name());
        if !call::acl_allows(cfg.acl.as_ref(), &parts.headers, topic, None) {
            return call::decline(parts, read);
        }
        let (topic, route, planned) = match self.plan(&cfg, &request, &peer.to_string()) {
            Plan::Python => return call::decline(parts, read),
            Plan::Refused(r) => return Handled::Answered(refused(r)),
            Plan::Store(topic, route, planned) => (topic, route, planned),
        };
        let producer = normalize_host(peer);
        let mut pending = Vec::with_capacity(planned.len());
        for p in planned {
            let req = SendRequest {
                producer_group: &topic,
                topic: &topic,
                queue_id: p.queue_id,
                sys_flag: p.out.sys_flag,
                born_timestamp: if p.out.born_timestamp > 0 {
                    p.out.born_timestamp
                } else {
                    call::now_ms()
                },
                flag: 0,
                properties: &p.out.properties,
                reconsume_times: 0,
                batch: false,
            };
            let (answer, answered) = oneshot::channel();
            let done = Box::new(move |code| {
                let _ = answer.send(code);
            });
            match self.port.put(&cfg, &req, route, &p.body, producer, done) {
                Ok(stored) => pending.push((p.message_id, stored, answered)),
                Err(e) => {
                    // As Python's sends: the call is refused with the store's word.
                    log::debug!("gRPC send from {peer} refused: {e}");
                    return Handled::Answered(refused(Refusal {
                        code: code::INTERNAL_SERVER_ERROR,
                        message: format!("{PROXY_EXCEPTION}{e}"),
                    }));
                }
            }
        }
        let mut entries = Vec::with_capacity(pending.len());
        for (message_id, stored, answered) in pending {
            let send_code = answered
                .await
                .unwrap_or(ferromq_remoting::codes::SYSTEM_ERROR);
            entries.push(if send_code == SUCCESS {
                SendResultEntry {
                    status: Some(status(code::OK, "OK")),
                    transaction_id: message_id.clone(),
                    message_id,
                    offset: stored.queue_offset,
                    recall_handle: stored.recall_handle.unwrap_or_default(),
                }
            } else {
                // The front's sends fail only with these codes (or the plane's SYSTEM_ERROR).
                let name = match send_code {
                    FLUSH_DISK_TIMEOUT => "FLUSH_DISK_TIMEOUT",
                    FLUSH_SLAVE_TIMEOUT => "FLUSH_SLAVE_TIMEOUT",
                    SLAVE_NOT_AVAILABLE => "SLAVE_NOT_AVAILABLE",
                    _ => "SYSTEM_ERROR",
                };
                let failed = convert::send_failure(send_code, name);
                SendResultEntry {
                    status: Some(status(failed.code, &failed.message)),
                    message_id,
                    ..Default::default()
                }
            });
        }
        let overall = call::overall_status(
            entries
                .iter()
                .map(|e| e.status.as_ref().map_or(0, |s| s.code)),
        );
        Handled::Answered(call::grpc_reply(&[SendMessageResponse {
            status: Some(overall),
            entries,
        }]))
    }

    /// The proxy's decisions on a request, in its order, before anything is stored.
    fn plan(&self, cfg: &SendConfig, request: &SendMessageRequest, peer: &str) -> Plan {
        let Some(first) = request.messages.first() else {
            return Plan::Python;
        };
        let topic = first.topic_name();
        if let Err(r) = convert::check_topic(topic) {
            return Plan::Refused(r);
        }
        if request.messages.iter().any(|m| m.topic_name() != topic) {
            return Plan::Refused(Refusal {
                code: code::MESSAGE_CORRUPTED,
                message: "topic in message is not same".into(),
            });
        }
        let Some(route) = cfg.topics.get(topic).copied() else {
            return Plan::Python;
        };
        if route.write_queues <= 0 {
            return Plan::Python;
        }
        let now = call::now_ms();
        let mut planned = Vec::with_capacity(request.messages.len());
        for m in &request.messages {
            if let Err(r) = convert::validate(m, now) {
                return Plan::Refused(r);
            }
            let out = match convert::to_store(m, peer) {
                Ok(out) => out,
                Err(r) => return Plan::Refused(r),
            };
            if out.message_type == MessageType::Transaction {
                return Plan::Python;
            }
            if !route.message_type.accepts(out.message_type) {
                return Plan::Refused(Refusal {
                    code: code::MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    message: format!(
                        "{PROXY_EXCEPTION}TopicMessageType validate failed, the expected type is {}, but actual type is {}",
                        route.message_type.name(),
                        out.message_type.name()
                    ),
                });
            }
            let queues = route.write_queues as usize;
            let queue = match &out.message_group {
                Some(group) => convert::fifo_queue(group, queues),
                None => self.turn.fetch_add(1, Ordering::Relaxed) % queues,
            };
            planned.push(Planned {
                out,
                queue_id: queue as i32,
                body: m.body.clone(),
                message_id: m
                    .system_properties
                    .as_ref()
                    .map(|sp| sp.message_id.clone())
                    .unwrap_or_default(),
            });
        }
        Plan::Store(topic.to_string(), route, planned)
    }
}

/// A refusal: the response carries only its status.
fn refused(r: Refusal) -> Response<ReplyBody> {
    call::grpc_reply(&[SendMessageResponse {
        status: Some(status(r.code, &r.message)),
        entries: Vec::new(),
    }])
}
