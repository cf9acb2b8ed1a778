//! ferromq's data plane: the broker's remoting connections on tokio threads.
//!
//! Modules, each using only those above it in this list (no import circles):
//!
//! * [`codes`], [`topics`], [`frame`], [`acl`], [`tags`], [`stats`], `wake`: wire constants, the
//!   system topics, the frame and JSON header codec, the plain ACL's signature check, the TAG
//!   expression reading, the counters, the eventfd that wakes Python.
//! * `conn`: one connection's state (reply queue and its bounds, reading, idle clock, ACL).
//! * `waits`: sends answered in groups once the disk or a slave has their offset.
//! * [`offsets`]: the broker's consumer offsets, one table for the plane and Python.
//! * `holds`: the table of held pulls (long polling).
//! * `pop_waits`: the gRPC front's receives waiting for a message (long polling), by topic.
//! * `hub`: what commands share with the plane and Python (events, arrivals, statistics, the
//!   hold table, the waiting pops).
//! * [`sender`]: the rules of a send (queue, flags, edits, store call, waits, reply code), used
//!   by the plane and, through the binding, by Python.
//! * [`popper`]: the rules of POP consumption (pop, ack, change of invisible time), used by the
//!   plane and, through the binding, by Python.
//! * [`pull`], [`send`], [`pop`]: the pulls, sends, pops and acks the plane serves, by what Python
//!   pushes down; the sends and pops the broker's gRPC front serves on the plane (`SendPort`,
//!   `PopPort`).
//! * `commands`: the hot commands as one enum (a request code names one; it applies itself).
//! * [`tls`]: TLS on the broker port (rustls), permissive or enforcing as Java has it.
//! * [`plane`]: the listener, connection bounds, TLS, and frames to and from Python.
//!
//! No Python here: the PyO3 binding lives in `crates/store-py`.

pub mod acl;
pub mod codes;
mod commands;
mod conn;
pub mod frame;
mod holds;
mod hub;
pub mod offsets;
pub mod plane;
pub mod pop;
mod pop_waits;
pub mod popper;
pub mod pull;
pub mod send;
pub mod sender;
pub mod stats;
pub mod tags;
pub mod tls;
pub mod topics;
mod waits;
mod wake;

pub use acl::{AclRules, PeerAcl};
pub use offsets::ConsumerOffsets;
pub use plane::{DataPlane, Event, PlaneConfig};
pub use pop::PopPort;
pub use popper::{PopSettings, Popper};
pub use pull::{PullConfig, Subscription, TagFilter};
pub use send::{SendConfig, SendPort};
pub use sender::{Redirect, SendError, SendRequest, SendSettings, Sender, Stored, TopicRoute};
pub use stats::{PlaneStats, QueueGets, RpcLatency, TopicPuts};
