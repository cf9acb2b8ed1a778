//! Master–slave replication of the CommitLog, on RocketMQ 4.x's HA wire protocol.
//!
//! The slave connects to the master's HA port and writes its CommitLog end as 8 bytes
//! (big-endian) right away, after each chunk it stores and every heartbeat interval. The master
//! answers with chunks from that offset: an 8-byte offset, a 4-byte size, then that many
//! CommitLog bytes, never across a file boundary; an idle master sends a header of size 0 as
//! heartbeat. A slave that reports 0 gets the master's last file from its start.
//!
//! * [`master`]: accepts slaves, streams to each, and releases SYNC_MASTER sends once a slave
//!   reported their offset (group acknowledgement, as the SYNC_FLUSH flush waiters).
//! * [`slave`]: the connection to the master; appends and dispatches what arrives.

pub mod master;
pub mod slave;

use std::time::Duration;

pub use master::HaMaster;
pub use slave::{HaSlave, SlaveStatus};

/// Size of a chunk header: the CommitLog offset (8 bytes) and the data size (4 bytes).
pub const HEADER_SIZE: usize = 12;

/// RocketMQ's `MessageStoreConfig` HA settings.
#[derive(Debug, Clone)]
pub struct HaConfig {
    /// `haSendHeartbeatInterval`: the most time between two messages on an idle connection.
    pub heartbeat_interval: Duration,
    /// `haHousekeepingInterval`: a connection silent this long is closed.
    pub housekeeping_interval: Duration,
    /// `haTransferBatchSize`: the most CommitLog bytes in one chunk.
    pub transfer_batch_size: usize,
    /// `haSlaveFallbehindMax`: a slave further behind than this is not "available".
    pub slave_fallbehind_max: u64,
}

impl Default for HaConfig {
    fn default() -> Self {
        HaConfig {
            heartbeat_interval: Duration::from_millis(5000),
            housekeeping_interval: Duration::from_millis(20_000),
            transfer_batch_size: 32 * 1024,
            slave_fallbehind_max: 256 * 1024 * 1024,
        }
    }
}
