//! Helpers shared by the store's integration tests.

use std::path::Path;

use ferromq_store::message::MessageMeta;
use ferromq_store::StoreConfig;

/// Small files, so tests cross CommitLog and consume-queue file boundaries.
#[allow(dead_code)] // not every test file uses it
pub fn small_config(root: &Path) -> StoreConfig {
    let mut c = StoreConfig::new(root);
    c.mapped_file_size_commitlog = 64 * 1024;
    c.mapped_file_size_consume_queue = 20 * 100;
    c.max_hash_slot_num = 1000;
    c.max_index_num = 4000;
    c.store_host = "127.0.0.1:10911".parse().unwrap();
    c
}

/// The header of a plain message to `topic`/`queue_id`, born at a fixed time and host.
pub fn meta(topic: &str, queue_id: i32) -> MessageMeta<'_> {
    MessageMeta {
        topic,
        queue_id,
        flag: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: "127.0.0.1:5555".parse().unwrap(),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
    }
}
