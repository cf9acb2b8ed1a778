//! ferromq's broker rules, and the data plane that serves the remoting port with them on tokio
//! threads. The wire (frames, codes, TLS) is `ferromq-remoting`'s; this crate decides what a
//! request does.
//!
//! Modules, each using only those above it in this list (no import circles):
//!
//! * [`acl`], [`tags`], [`topics`], [`stats`], [`wake`]: the plain ACL's signature check, the TAG
//!   expression reading, the system topics, the counters, the eventfd that wakes Python.
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
//! * [`plane`]: the listener, connection bounds, TLS, and frames to and from Python.
//!
//! No Python here: the PyO3 binding lives in `crates/python`.

pub mod acl;
mod commands;
mod conn;
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
pub mod topics;
mod waits;
pub mod wake;

pub use acl::{AclRules, PeerAcl};
pub use offsets::ConsumerOffsets;
pub use plane::{DataPlane, Event, PlaneConfig};
pub use pop::PopPort;
pub use popper::{PopSettings, Popper};
pub use pull::{PullConfig, Subscription, TagFilter};
pub use send::{SendConfig, SendPort};
pub use sender::{Redirect, SendError, SendRequest, SendSettings, Sender, Stored, TopicRoute};
pub use stats::{PlaneStats, QueueGets, RpcLatency, TopicPuts};
