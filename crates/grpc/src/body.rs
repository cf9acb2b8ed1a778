//! The bodies of a call: a request's on its way to grpcio ([`CallBody`]: as the client streams
//! it, or partly or wholly read by the front first), and a reply's on its way to the client
//! ([`ReplyBody`]: grpcio's as it comes, or one the front wrote itself).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

/// A request's body for grpcio: what the front already read (`head`), then the rest as the
/// client sends it.
pub struct CallBody {
    head: Option<Bytes>,
    rest: Option<Incoming>,
}

impl CallBody {
    /// The client's body, untouched.
    pub fn streamed(body: Incoming) -> CallBody {
        CallBody {
            head: None,
            rest: Some(body),
        }
    }

    /// `head` read by the front, then `rest` (None: the client's body ended there).
    pub fn read(head: Bytes, rest: Option<Incoming>) -> CallBody {
        CallBody {
            head: Some(head).filter(|h| !h.is_empty()),
            rest,
        }
    }

    /// What the front read (empty if nothing), and the rest as the client sends it.
    pub fn into_parts(self) -> (Bytes, Option<Incoming>) {
        (self.head.unwrap_or_default(), self.rest)
    }
}

impl Body for CallBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(head) = self.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none() && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }
}

/// A reply's body: grpcio's frame by frame as it comes (data, then trailers), or the front's own
/// (its data, if any, then its trailers).
pub enum ReplyBody {
    Upstream(Incoming),
    Own {
        data: Option<Bytes>,
        trailers: Option<HeaderMap>,
    },
}

impl ReplyBody {
    /// No body at all: a trailers-only reply carries its status in its headers.
    pub fn empty() -> ReplyBody {
        ReplyBody::Own {
            data: None,
            trailers: None,
        }
    }
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ReplyBody::Upstream(body) => Pin::new(body).poll_frame(cx),
            ReplyBody::Own { data, trailers } => Poll::Ready(
                data.take()
                    .map(Frame::data)
                    .or_else(|| trailers.take().map(Frame::trailers))
                    .map(Ok),
            ),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReplyBody::Upstream(body) => body.is_end_stream(),
            ReplyBody::Own { data, trailers } => data.is_none() && trailers.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReplyBody::Upstream(body) => body.size_hint(),
            ReplyBody::Own { data, .. } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

/// What the front did with a call it may serve itself.
pub enum Handled {
    Answered(Response<ReplyBody>),
    /// grpcio's to answer, with what the front read of it.
    Declined(Request<CallBody>),
}
