//! The topics RocketMQ keeps to itself, as Apache RocketMQ's `TopicValidator` names them: one
//! list for the gRPC front (a 5.x client may not name them) and, through the binding
//! (`_store.SYSTEM_TOPICS`), for the broker's Python (an admin may not create them).

use ferromq_remoting::codes::TRANS_HALF_TOPIC;

/// Every topic whose name starts so is a system topic (revive logs, the timer wheel, ...).
pub const SYSTEM_TOPIC_PREFIX: &str = "rmq_sys_";

/// The system topics every broker has, whatever its configuration (`SYSTEM_TOPIC_SET` before a
/// broker adds its own cluster, broker and reply topics).
pub const SYSTEM_TOPICS: [&str; 10] = [
    "TBW102",
    ferromq_store::send::SCHEDULE_TOPIC,
    "BenchmarkTest",
    TRANS_HALF_TOPIC,
    "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
];

/// Whether `name` is one of [`SYSTEM_TOPICS`] or starts with [`SYSTEM_TOPIC_PREFIX`]
/// (`TopicValidator.isSystemTopic`).
pub fn is_system_topic(name: &str) -> bool {
    name.starts_with(SYSTEM_TOPIC_PREFIX) || SYSTEM_TOPICS.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_topics_are_the_list_and_the_prefix() {
        for name in SYSTEM_TOPICS {
            assert!(is_system_topic(name), "{name}");
        }
        assert!(is_system_topic("rmq_sys_REVIVE_LOG_DefaultCluster"));
        assert!(!is_system_topic("RMQ_SYS_OTHER"));
        assert!(!is_system_topic("TopicTest"));
        assert!(!is_system_topic("TBW102 "));
    }
}
