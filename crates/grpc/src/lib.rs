//! ferromq's gRPC front: the port the RocketMQ 5.x clients (`apache.rocketmq.v2.MessagingService`)
//! connect to. It speaks to them as Apache RocketMQ's proxy does, TLS and plain clients on one
//! port (`tls.server.mode` permissive, enforcing, or no TLS at all). The hot calls (SendMessage,
//! a simple consumer's ReceiveMessage and AckMessage) are served here, on the broker's data plane,
//! by the same rules as its remoting sends and pops; every other call, and every hot one whose
//! decisions are Python's, is served in Python: handed to it directly through the [`inbox`]
//! (unary requests), or over HTTP/2 on a Unix socket to the broker's grpcio server (Telemetry,
//! and the calls the front cannot read whole).
//!
//! Modules, each using only those above it:
//!
//! * [`proto`]: the messages of the hot calls, from the published `.proto`.
//! * [`convert`]: the proxy's rules of a message, sent and received (checks, properties, types,
//!   FIFO queues, receipts), also applied by Python through the binding.
//! * [`body`], [`call`]: the bodies of a call both ways; one unary request read and one reply
//!   written as gRPC frames them.
//! * [`sends`], [`receives`]: SendMessage; ReceiveMessage and AckMessage.
//! * [`upstream`]: the few HTTP/2 connections to grpcio that every client connection shares,
//!   each opened when a call first needs it.
//! * [`inbox`]: the calls Python serves whole, handed to it directly (a queue it drains on its
//!   event loop) instead of through grpcio.
//! * [`forward`]: one call served here or handed on (the client's address added as
//!   `x-ferromq-peer`), its bodies and trailers streamed both ways; the calls a connection has
//!   open.
//! * [`front`]: the listener, TLS or plain by the first byte, one HTTP/2 connection per client,
//!   the connection caps, handshake and idle clocks, shutdown.
//!
//! No Python here: the PyO3 binding lives in `crates/python`.

pub mod body;
pub mod call;
pub mod convert;
pub mod forward;
pub mod front;
pub mod inbox;
pub mod proto;
pub mod receives;
pub mod sends;
pub mod upstream;

pub use call::PEER_HEADER;
pub use front::{FrontConfig, GrpcFront};
