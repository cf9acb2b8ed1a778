//! The files of RocketMQ 5.x's timer messages (`TimerMessageStore`), byte for byte, so that a store
//! with pending timers moves between ferromq and Apache RocketMQ 5.x:
//!
//! * [`TimerLog`] (`timerlog/`): 52-byte units in fixed-size files named by offset, each pointing
//!   at a message in the CommitLog and back at the previous unit of the same second.
//! * [`TimerWheel`] (`timerwheel`): two weeks of one-second (one precision) slots of 32 bytes:
//!   the slot's time and the first and last units of its chain in the timer log.
//! * [`TimerCheckpoint`] (`config/timercheck`): how far the timer read, wrote and flushed.
//!
//! All numbers are big-endian, as Java's `ByteBuffer` writes them.

mod checkpoint;
mod log;
mod wheel;

pub use checkpoint::TimerCheckpoint;
pub use log::{TimerLog, TimerUnit, BLANK_MAGIC, UNIT_SIZE};
pub use wheel::{Slot, TimerWheel, WheelSync, SLOTS_TOTAL};

/// The system topic timer messages wait in (queue 0) until they are due.
pub const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";

/// Unit magic bits (`TimerMessageStore.MAGIC_*`): every unit has DEFAULT; ROLL marks a message
/// put back into a later slot because it was due beyond the roll window; DELETE a recall.
pub const MAGIC_DEFAULT: i32 = 1;
pub const MAGIC_ROLL: i32 = 1 << 1;
pub const MAGIC_DELETE: i32 = 1 << 2;

/// Java's `String.hashCode` of a topic, kept in each unit for the timer metrics (0 for none).
pub fn topic_hash(topic: Option<&str>) -> i32 {
    topic.map_or(0, crate::hash::java_string_hash)
}
