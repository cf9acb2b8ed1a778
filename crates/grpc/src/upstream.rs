//! grpcio's end of the calls the front hands on: a few HTTP/2 connections on its Unix socket,
//! shared by every client connection (HTTP/2 multiplexes the calls of many clients on one; each
//! call names its client in its own headers). A connection is opened when a call first needs
//! it and again once it has ended, so a client connection that hands nothing on costs the
//! broker its own socket only, and a thousand clients cost grpcio a few connections.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::client::conn::http2 as client;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::UnixStream;
use tokio::sync::Mutex;

use crate::body::CallBody;

/// The connections to grpcio; a client connection's calls all go on one of them (its index
/// modulo this), so they reach grpcio in the order the client sent them.
pub const UPSTREAM_CONNECTIONS: usize = 4;
/// One call's receive window on an upstream connection: what grpcio may send ahead of a client
/// that does not read its reply (the calls of one client connection: MAX_CONCURRENT_STREAMS at
/// most). Over a Unix socket a window update costs little.
const STREAM_WINDOW: u32 = 256 * 1024;
/// The connection's window is HTTP/2's largest, so that a client that does not read holds only
/// its own calls' windows, never the connection's that other clients share.
const CONNECTION_WINDOW: u32 = (1 << 31) - 1;
/// Opening a connection to grpcio (connect and handshake) takes at most this.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call could not be handed on.
#[derive(Debug)]
pub enum NotSent {
    /// grpcio could not be reached (no connection could be opened).
    Unreachable(io::Error),
    /// The connection failed the call (grpcio went, or reset it).
    Failed(hyper::Error),
}

impl std::fmt::Display for NotSent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotSent::Unreachable(e) => write!(f, "grpcio is not reachable: {e}"),
            NotSent::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// The shared connections to grpcio at `path`.
pub struct Upstream {
    path: PathBuf,
    client: client::Builder<TokioExecutor>,
    /// Each connection's sender, None until a call needs it (or after it ended). The lock is
    /// held while a connection opens, so one call opens it and the others wait for it.
    slots: Box<[Mutex<Option<SendRequest<CallBody>>>]>,
}

impl Upstream {
    pub fn new(path: PathBuf) -> Upstream {
        let mut client = client::Builder::new(TokioExecutor::new());
        client
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW);
        Upstream {
            path,
            client,
            slots: (0..UPSTREAM_CONNECTIONS)
                .map(|_| Mutex::new(None))
                .collect(),
        }
    }

    /// The Unix socket grpcio listens on.
    pub fn path(&self) -> &PathBuf {
        &self.path
    }

    /// Connections to grpcio open now.
    pub async fn open_connections(&self) -> usize {
        let mut open = 0;
        for slot in self.slots.iter() {
            open += usize::from(slot.lock().await.as_ref().is_some_and(|s| !s.is_closed()));
        }
        open
    }

    /// `req` sent on connection `key` (modulo their number), opened first when it is not open;
    /// a request the connection ended before taking is sent once more on a fresh one.
    pub async fn send(
        &self,
        key: usize,
        req: http::Request<CallBody>,
    ) -> Result<http::Response<Incoming>, NotSent> {
        let slot = &self.slots[key % self.slots.len()];
        let mut sender = self.sender(slot).await?;
        match sender.try_send_request(req).await {
            Ok(reply) => Ok(reply),
            Err(mut e) => match e.take_message() {
                // Not taken (the connection had ended): once more, on a new connection.
                Some(req) => {
                    let mut sender = self.sender(slot).await?;
                    sender.send_request(req).await.map_err(NotSent::Failed)
                }
                None => Err(NotSent::Failed(e.into_error())),
            },
        }
    }

    /// The slot's connection, opened if it is not open.
    async fn sender(
        &self,
        slot: &Mutex<Option<SendRequest<CallBody>>>,
    ) -> Result<SendRequest<CallBody>, NotSent> {
        let mut held = slot.lock().await;
        if let Some(sender) = held.as_ref().filter(|s| !s.is_closed()) {
            return Ok(sender.clone());
        }
        *held = None;
        let sender = tokio::time::timeout(OPEN_TIMEOUT, self.open())
            .await
            .unwrap_or_else(|_| Err(io::Error::from(io::ErrorKind::TimedOut)))
            .map_err(NotSent::Unreachable)?;
        *held = Some(sender.clone());
        Ok(sender)
    }

    /// A new connection, driven by a task of its own until either side ends it.
    async fn open(&self) -> io::Result<SendRequest<CallBody>> {
        let sock = UnixStream::connect(&self.path).await?;
        let (sender, conn) = self
            .client
            .handshake(TokioIo::new(sock))
            .await
            .map_err(io::Error::other)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                log::debug!("gRPC: a connection to grpcio ended: {e}");
            }
        });
        Ok(sender)
    }
}
