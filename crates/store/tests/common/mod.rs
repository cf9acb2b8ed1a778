//! Helpers shared by the store's integration tests.

use ferromq_store::message::MessageMeta;

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
