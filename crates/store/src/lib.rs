//! ferromq's storage engine: the Apache RocketMQ 4.x on-disk store, byte for byte.
//!
//! * [`commitlog`]: every message in one log of fixed-size files.
//! * [`consume_queue`]: per topic and queue, 20-byte units pointing into the CommitLog.
//! * [`index`]: the hash index from `topic#key` to CommitLog offsets.
//! * [`columnar`]: records decoded into Arrow-layout columns for analytics readers.
//! * [`store`]: [`MessageStore`], which keeps them consistent, flushes and recovers.
//! * [`timer`]: the files of RocketMQ 5.x's timer messages (timer log, wheel, checkpoint).
//!
//! No Python here: the PyO3 binding lives in `crates/python`.

pub mod checkpoint;
pub mod client_batch;
pub mod columnar;
pub mod commitlog;
pub mod config;
pub mod consume_queue;
pub mod error;
pub mod flush;
pub mod ha;
pub mod hash;
pub mod index;
pub mod lmq;
pub mod mapped_file;
pub mod mapped_file_queue;
pub mod message;
pub mod message_store;
pub mod segment_index;
pub mod send;
pub mod timer;

pub use config::{FlushDiskType, StoreConfig};
pub use error::{Result, StoreError};
pub use message::{MessageMeta, RecordView};
pub use message_store::{
    CleanInput, CleanReport, GetResult, GetStatus, MessageStore, PutBatchResult, PutResult,
    QueueInfo, RecoveryReport, RetentionStats,
};
pub use send::BatchItem;
