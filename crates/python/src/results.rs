//! What the store's writes and reads answer: where a put or a batch landed, and the records
//! of a queue read.

use ferromq_store::{GetResult as CoreGetResult, PutBatchResult as CoreBatch};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::IntoPy;

/// Where one put landed.
#[pyclass(frozen, get_all, module = "ferromq._store")]
pub struct PutResult {
    topic: String,
    queue_id: i32,
    queue_offset: i64,
    physical_offset: i64,
    wrote_bytes: usize,
    store_timestamp: i64,
    msg_id: String,
    end_offset: u64,
    /// False when SYNC_FLUSH waited `sync_flush_timeout_ms` without the bytes reaching disk.
    flush_ok: bool,
    /// False when the stored WAIT property is "false": the producer does not wait for the disk.
    wait: bool,
    /// Tags code of the stored TAGS.
    tags_code: i64,
    /// The light message queues the record was dispatched to, each with its next offset.
    lmq_arrivals: Vec<(String, i64)>,
}

impl PutResult {
    pub(crate) fn new(r: ferromq_store::PutResult, flush_ok: bool) -> Self {
        PutResult {
            end_offset: r.end_offset(),
            msg_id: r.msg_id(),
            topic: r.topic,
            queue_id: r.queue_id,
            queue_offset: r.queue_offset,
            physical_offset: r.physical_offset,
            wrote_bytes: r.wrote_bytes,
            store_timestamp: r.store_timestamp,
            flush_ok,
            wait: r.wait,
            tags_code: r.tags_code,
            lmq_arrivals: r.lmq_arrivals,
        }
    }
}

#[pymethods]
impl PutResult {
    fn __repr__(&self) -> String {
        format!(
            "PutResult(topic={:?}, queue_id={}, queue_offset={}, physical_offset={}, msg_id={:?}, flush_ok={})",
            self.topic,
            self.queue_id,
            self.queue_offset,
            self.physical_offset,
            self.msg_id,
            if self.flush_ok { "True" } else { "False" }
        )
    }
}

/// Where one batch landed: consecutive queue offsets from `first_queue_offset`.
#[pyclass(frozen, module = "ferromq._store")]
pub struct PutBatchResult {
    inner: CoreBatch,
    flush_ok: bool,
}

impl PutBatchResult {
    pub(crate) fn new(inner: CoreBatch, flush_ok: bool) -> Self {
        PutBatchResult { inner, flush_ok }
    }
}

#[pymethods]
impl PutBatchResult {
    #[getter]
    fn topic(&self) -> &str {
        &self.inner.topic
    }
    #[getter]
    fn queue_id(&self) -> i32 {
        self.inner.queue_id
    }
    #[getter]
    fn first_queue_offset(&self) -> i64 {
        self.inner.first_queue_offset
    }
    #[getter]
    fn count(&self) -> usize {
        self.inner.physical_offsets.len()
    }
    #[getter]
    fn physical_offsets(&self) -> Vec<i64> {
        self.inner.physical_offsets.clone()
    }
    #[getter]
    fn msg_ids(&self) -> Vec<String> {
        self.inner.msg_ids()
    }
    #[getter]
    fn wrote_bytes(&self) -> usize {
        self.inner.wrote_bytes
    }
    #[getter]
    fn store_timestamp(&self) -> i64 {
        self.inner.store_timestamp
    }
    #[getter]
    fn end_offset(&self) -> u64 {
        self.inner.end_offset()
    }
    #[getter]
    fn flush_ok(&self) -> bool {
        self.flush_ok
    }
    /// False when the batch's WAIT property is "false".
    #[getter]
    fn wait(&self) -> bool {
        self.inner.wait
    }
    fn __len__(&self) -> usize {
        self.inner.physical_offsets.len()
    }
}

/// The answer to a read of one queue: the stored records back to back in `body`.
#[pyclass(frozen, module = "ferromq._store")]
pub struct GetResult {
    inner: CoreGetResult,
    body: Py<PyBytes>,
}

impl GetResult {
    /// The result of a store read run without the GIL, its records as one `bytes`.
    pub(crate) fn read(
        py: Python<'_>,
        read: impl FnOnce() -> ferromq_store::Result<CoreGetResult> + Send,
    ) -> PyResult<Self> {
        let inner = py.detach(read).py_err(py)?;
        let body = PyBytes::new(py, &inner.body).unbind();
        Ok(GetResult { inner, body })
    }
}

#[pymethods]
impl GetResult {
    /// RocketMQ's `GetMessageStatus` name, e.g. `FOUND` or `OFFSET_OVERFLOW_ONE`.
    #[getter]
    fn status(&self) -> &'static str {
        self.inner.status.name()
    }
    /// The last record read is read from disk (a pull's accessMessageInMemoryMaxRatio): a
    /// slave may serve the consumer better.
    #[getter]
    fn suggest_pulling_from_slave(&self) -> bool {
        self.inner.suggest_pulling_from_slave
    }
    /// The response code a pull at `request_offset` that read this answers with (the data
    /// plane's mapping, so both sides answer alike).
    fn pull_code(&self, request_offset: i64) -> i32 {
        ferromq_broker::pull::code_of(self.inner.status, request_offset)
    }
    #[getter]
    fn next_begin_offset(&self) -> i64 {
        self.inner.next_begin_offset
    }
    #[getter]
    fn min_offset(&self) -> i64 {
        self.inner.min_offset
    }
    #[getter]
    fn max_offset(&self) -> i64 {
        self.inner.max_offset
    }
    #[getter]
    fn message_count(&self) -> usize {
        self.inner.message_count
    }
    #[getter]
    fn queue_offsets(&self) -> Vec<i64> {
        self.inner.queue_offsets.clone()
    }
    #[getter]
    fn body(&self, py: Python<'_>) -> Py<PyBytes> {
        self.body.clone_ref(py)
    }
    fn __repr__(&self) -> String {
        format!(
            "GetResult(status={}, message_count={}, next_begin_offset={}, min_offset={}, max_offset={})",
            self.inner.status.name(),
            self.inner.message_count,
            self.inner.next_begin_offset,
            self.inner.min_offset,
            self.inner.max_offset
        )
    }
}
