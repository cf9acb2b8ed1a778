//! ferromq's gRPC front: the port the RocketMQ 5.x clients (`apache.rocketmq.v2.MessagingService`)
//! connect to. It speaks to them as Apache RocketMQ's proxy does, TLS and plain clients on one
//! port (`tls.server.mode` permissive, enforcing, or no TLS at all), and hands every call on,
//! over HTTP/2 on a Unix socket, to the broker's grpcio server, which serves the calls in Python.
//!
//! Modules, each using only those above it:
//!
//! * [`forward`]: one call handed on (the client's address added as `x-ferromq-peer`), its
//!   bodies and trailers streamed both ways; the calls a connection has open.
//! * [`front`]: the listener, TLS or plain by the first byte, one HTTP/2 connection per client
//!   with its own to grpcio, bounds and idle clock, shutdown.
//!
//! No Python here: the PyO3 binding lives in `crates/store-py`.

pub mod body;
pub mod call;
pub mod convert;
pub mod forward;
pub mod front;
pub mod proto;
pub mod receives;
pub mod sends;

pub use forward::PEER_HEADER;
pub use front::{FrontConfig, GrpcFront};
