//! ferromq's data plane: the broker's remoting connections on tokio threads.
//!
//! * [`plane`]: the listener, connection bounds, frames to and from Python.
//! * [`sender`]: the rules of a send (queue, flags, edits, store call, waits, reply code), used
//!   by the plane and, through the binding, by Python.
//! * [`send`]: sends served from the store without Python, by rules Python pushes down.
//! * [`pull`]: pulls (and held pulls) served from the store the same way.
//! * [`acl`]: the plain ACL's signature check of those sends, by rules Python pushes down.
//! * [`frame`]: the frame and JSON header codec it needs.
//! * [`codes`]: the request and response codes and pull flags, defined once.
//!
//! No Python here: the PyO3 binding lives in `crates/store-py`.

pub mod acl;
pub mod codes;
pub mod frame;
pub mod plane;
pub mod pull;
pub mod send;
pub mod sender;
pub mod stats;
mod waits;
mod wake;

pub use acl::{AclRules, PeerAcl};
pub use plane::{DataPlane, Event, PlaneConfig};
pub use pull::{PullConfig, Subscription, TagFilter};
pub use send::SendConfig;
pub use sender::{Redirect, SendError, SendRequest, SendSettings, Sender, Stored, TopicRoute};
pub use stats::{PlaneStats, QueueGets, RpcLatency, TopicPuts};
