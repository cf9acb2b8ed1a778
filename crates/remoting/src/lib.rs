//! ferromq's RocketMQ remoting wire: what a frame on the broker port is, before any broker rule.
//!
//! Modules, each using only those above it in this list (no import circles):
//!
//! * [`codes`]: the request codes, response codes and pull flags (`_store.WIRE_CONSTANTS`), and
//!   the response code of a store error.
//! * [`frame`]: the frame and its JSON header, read as far as the data plane needs and written
//!   for its replies.
//! * [`tls`]: TLS on the broker port (rustls), permissive or enforcing as Java has it, and the
//!   first byte that tells a handshake from a plain frame.
//!
//! The broker's rules and the data plane that serves this port with them are in
//! `crates/broker` (`ferromq-broker`); no Python here: the PyO3 binding lives in `crates/python`.

pub mod codes;
pub mod frame;
pub mod tls;
