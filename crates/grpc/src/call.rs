//! One unary-request call the front serves itself: which calls it may read, the request read
//! (bounded) and decoded, and the reply written as gRPC frames them (length-prefixed messages,
//! then trailers with the gRPC status).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use ferromq_broker::AclRules;

use crate::body::{CallBody, Handled, ReplyBody};
use crate::convert::code;
use crate::proto::Status;

/// A request body past this is handed on to grpcio unread past it (a batch of large bodies;
/// grpcio takes up to 130 MiB, as Java's proxy does).
pub const MAX_READ: usize = 8 * 1024 * 1024;
/// The request bytes the front holds at once, over every call it reads itself: past them, a
/// call is handed on to grpcio as it comes instead (whatever many clients send at once, the
/// front's memory stays bounded).
pub const READ_BUDGET: usize = 64 * 1024 * 1024;

/// Request bytes held now, against READ_BUDGET (one budget for the process: every front).
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Request bytes of one call, held against READ_BUDGET until it is dropped.
#[derive(Debug, Default)]
pub struct Held(usize);

impl Held {
    /// Holds `n` more bytes, or false when the budget has not that much left.
    fn take(&mut self, n: usize) -> bool {
        let taken = HELD.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_add(n).filter(|&h| h <= READ_BUDGET)
        });
        if taken.is_ok() {
            self.0 += n;
        }
        taken.is_ok()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.fetch_sub(self.0, Ordering::AcqRel);
    }
}
/// The header Python reads a client's address from (`ip:port`, `[ip6]:port`, as grpcio's own
/// peer names it): the front sets it on every call it hands on, over whatever the client sent,
/// so born hosts and the ACL's address checks see the client and not the Unix socket.
pub const PEER_HEADER: &str = "x-ferromq-peer";

/// gRPC's length-prefixed message: a compression flag and a big-endian length.
const PREFIX: usize = 5;
/// gRPC's status codes the front answers with itself.
pub const GRPC_CANCELLED: u32 = 1;
pub const GRPC_UNAVAILABLE: u32 = 14;

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A call the front can read: gRPC content, not compressed, from a client that named itself
/// (grpcio answers the others as the proxy does).
pub fn plain_call(headers: &HeaderMap) -> bool {
    grpc_identity(headers) && client_id(headers).is_some()
}

/// gRPC content, not compressed.
pub fn grpc_identity(headers: &HeaderMap) -> bool {
    let grpc = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    let identity = headers
        .get("grpc-encoding")
        .is_none_or(|v| v.as_bytes() == b"identity");
    grpc && identity
}

/// Whether the ACL (when on) lets the front serve this call on `topic` (and `group`): signed by
/// an account Python allowed them (`AclRules::allows_grpc`). Checked before anything else of the
/// call, as Java's proxy authenticates first; a call in doubt is declined, and Python answers it.
pub fn acl_allows(
    acl: Option<&AclRules>,
    headers: &HeaderMap,
    topic: &str,
    group: Option<&str>,
) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    acl.is_none_or(|acl| {
        acl.allows_grpc(text("authorization"), text("x-mq-date-time"), topic, group)
    })
}

/// The client's id (`x-mq-client-id`), when it sent one.
pub fn client_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("x-mq-client-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
}

/// The call's deadline as the client gave it (`grpc-timeout`: up to 8 digits and a unit).
pub fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let text = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at_checked(text.len().checked_sub(1)?)?;
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A request read whole and decoded: its head, its body as read, its message, and the budget its
/// bytes hold until the call is served.
pub type Decoded<M> = (http::request::Parts, Bytes, M, Held);

/// `req`'s one message, read up to MAX_READ and decoded as `M`; else what becomes of the call:
/// grpcio's to answer (too large, past the budget, compressed, not one message, not decodable),
/// or answered (the client reset it while it was read).
pub async fn read<M: prost::Message + Default>(
    req: Request<Incoming>,
) -> Result<Decoded<M>, Handled> {
    let (parts, read, message, held) = read_message(req.map(CallBody::streamed)).await?;
    match M::decode(message) {
        Ok(m) => Ok((parts, read, m, held)),
        Err(_) => Err(decline(parts, read)),
    }
}

/// `req`'s one message as the client encoded it (its body as read, then the message within
/// it), read up to MAX_READ (what the front read of it before counts); else grpcio's to answer
/// (too large, past the budget, not one message), or answered (the client reset it while it
/// was read).
pub async fn read_message(req: Request<CallBody>) -> Result<Decoded<Bytes>, Handled> {
    let (parts, body) = req.into_parts();
    let mut held = Held::default();
    let (read, rest) = match read_up_to(body, MAX_READ, &mut held).await {
        Ok(read) => read,
        Err(e) => {
            return Err(Handled::Answered(trailers_only(
                GRPC_CANCELLED,
                &e.to_string(),
            )))
        }
    };
    let message = match rest {
        None => single_message(&read),
        Some(_) => None,
    };
    match message {
        Some(range) => {
            let message = read.slice(range);
            Ok((parts, read, message, held))
        }
        None => Err(Handled::Declined(Request::from_parts(
            parts,
            CallBody::read(read, rest),
        ))),
    }
}

/// A call the front read and then leaves to grpcio.
pub fn decline(parts: http::request::Parts, read: Bytes) -> Handled {
    Handled::Declined(Request::from_parts(parts, CallBody::read(read, None)))
}

/// Up to `limit` bytes of `body` (held in `held`), and the rest of it when there is more or the
/// budget has no room for it.
async fn read_up_to(
    body: CallBody,
    limit: usize,
    held: &mut Held,
) -> Result<(Bytes, Option<Incoming>), hyper::Error> {
    let (head, rest) = body.into_parts();
    let room = held.take(head.len());
    let Some(mut body) = rest else {
        return Ok((head, None));
    };
    if !room || head.len() > limit {
        return Ok((head, Some(body)));
    }
    let mut read = BytesMut::from(head);
    while let Some(frame) = body.frame().await {
        // gRPC requests carry no trailers: anything but data is dropped.
        if let Ok(data) = frame?.into_data() {
            let room = held.take(data.len());
            read.extend_from_slice(&data);
            if !room || read.len() > limit {
                return Ok((read.freeze(), Some(body)));
            }
        }
    }
    Ok((read.freeze(), None))
}

/// Where the one uncompressed message of a unary call's body lies in it.
fn single_message(body: &[u8]) -> Option<std::ops::Range<usize>> {
    let (prefix, message) = body.split_at_checked(PREFIX)?;
    let len = u32::from_be_bytes(prefix[1..].try_into().ok()?) as usize;
    (prefix[0] == 0 && message.len() == len).then_some(PREFIX..body.len())
}

pub fn status(code: i32, message: &str) -> Status {
    Status {
        code,
        message: message.to_string(),
    }
}

/// A call's status from its entries' (one code for all: it, by name; else MULTIPLE_RESULTS).
pub fn overall_status(mut codes: impl Iterator<Item = i32>) -> Status {
    let first = codes.next().unwrap_or(code::OK);
    if codes.all(|c| c == first) {
        status(first, code::name(first))
    } else {
        status(code::MULTIPLE_RESULTS, "MULTIPLE_RESULTS")
    }
}

/// A reply of `messages` (one for a unary call, a stream's in order) and gRPC status OK (the
/// RocketMQ status is in the messages).
pub fn grpc_reply<M: prost::Message>(messages: &[M]) -> Response<ReplyBody> {
    let len: usize = messages.iter().map(|m| PREFIX + m.encoded_len()).sum();
    let mut data = BytesMut::with_capacity(len);
    for message in messages {
        data.put_u8(0);
        data.put_u32(message.encoded_len() as u32);
        message
            .encode(&mut data)
            .expect("the buffer has the messages' length");
    }
    ok_reply(data.freeze())
}

/// A reply of messages encoded elsewhere (Python's), in order, and gRPC status OK.
pub fn encoded_reply(messages: &[Bytes]) -> Response<ReplyBody> {
    let len: usize = messages.iter().map(|m| PREFIX + m.len()).sum();
    let mut data = BytesMut::with_capacity(len);
    for message in messages {
        data.put_u8(0);
        data.put_u32(message.len() as u32);
        data.put_slice(message);
    }
    ok_reply(data.freeze())
}

/// A reply of gRPC frames `data`, then trailers with status OK.
fn ok_reply(data: Bytes) -> Response<ReplyBody> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let mut reply = Response::new(ReplyBody::Own {
        data: Some(data),
        trailers: Some(trailers),
    });
    reply
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    reply
}

/// A reply of headers only, with gRPC status `grpc_status` and `message` (percent-encoded, as
/// gRPC carries any text in `grpc-message`).
pub fn trailers_only(grpc_status: u32, message: &str) -> Response<ReplyBody> {
    let mut reply = Response::new(ReplyBody::empty());
    let headers = reply.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from(grpc_status));
    if let Ok(message) = HeaderValue::from_str(&percent_encoded(message)) {
        headers.insert("grpc-message", message);
    }
    reply
}

/// `text` as gRPC sends a status message: bytes outside printable ASCII, and '%', as %XX.
fn percent_encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_budget_is_shared_and_given_back() {
        let mut first = Held::default();
        assert!(first.take(READ_BUDGET));
        let mut second = Held::default();
        assert!(!second.take(1), "nothing is left past the budget");
        drop(first);
        assert!(second.take(1), "a call served gives its bytes back");
    }

    #[test]
    fn status_messages_are_percent_encoded() {
        assert_eq!(percent_encoded("no new message"), "no new message");
        assert_eq!(percent_encoded("100% ü\n"), "100%25 %C3%BC%0A");
    }

    #[test]
    fn grpc_timeouts_read_with_their_units() {
        let mut h = HeaderMap::new();
        h.insert("grpc-timeout", HeaderValue::from_static("4999m"));
        assert_eq!(timeout(&h), Some(Duration::from_millis(4999)));
        h.insert("grpc-timeout", HeaderValue::from_static("3S"));
        assert_eq!(timeout(&h), Some(Duration::from_secs(3)));
        h.insert("grpc-timeout", HeaderValue::from_static("x"));
        assert_eq!(timeout(&h), None);
    }
}
