//! `ConsumerOffsets`: the broker's one table of consumer offsets
//! ([`ferromq_broker::ConsumerOffsets`]), shared with the data plane.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ferromq_broker::offsets::{self, ConsumerOffsets as Table};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

#[pyclass(frozen, module = "ferromq._store")]
pub struct ConsumerOffsets {
    pub(crate) table: Arc<Table>,
}

#[pymethods]
impl ConsumerOffsets {
    #[new]
    fn new() -> Self {
        ConsumerOffsets {
            table: Arc::new(Table::new()),
        }
    }

    fn commit(&self, group: &str, topic: &str, queue_id: i32, offset: i64) {
        self.table.commit(group, topic, queue_id, offset);
    }

    /// The committed offset, or -1.
    fn query(&self, group: &str, topic: &str, queue_id: i32) -> i64 {
        self.table.query(group, topic, queue_id)
    }

    /// Replaces the offsets of one `topic@group`.
    fn put_all(&self, key: String, queues: HashMap<i32, i64>) {
        self.table.put_all(key, queues);
    }

    fn remove_topic(&self, topic: &str) {
        self.table.remove_topic(topic);
    }

    /// Every `topic@group` of the topics named goes, in one pass.
    fn remove_topics(&self, py: Python<'_>, topics: HashSet<String>) {
        py.detach(|| self.table.remove_topics(&topics));
    }

    /// Every `topic@group` of `group` goes.
    fn remove_group(&self, group: &str) {
        self.table.remove_group(group);
    }

    /// `topic@group` -> {queue id: offset}, a copy.
    fn snapshot(&self) -> HashMap<String, HashMap<i32, i64>> {
        self.table.snapshot().into_iter().collect()
    }

    /// The table as `consumerOffset.json` holds it (sorted, indented; see the broker crate's
    /// `ConsumerOffsets::to_json`), made without the GIL.
    fn to_json<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let json = py.detach(|| self.table.to_json());
        PyBytes::new(py, &json)
    }

    /// Whether the table changed since the last call (and marks it clean).
    fn take_dirty(&self) -> bool {
        self.table.take_dirty()
    }

    /// The table's key of a group's offsets in a topic.
    #[staticmethod]
    fn key(topic: &str, group: &str) -> String {
        offsets::key(topic, group)
    }
}
