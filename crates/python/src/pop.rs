//! `Popper`: the rules of POP consumption ([`ferromq_broker::popper`]) for the pops and acks
//! Python serves (orderly ones, SQL92 filters, pops that wait, and every one when the data
//! plane is off). The data plane runs the same rules.

use std::sync::Arc;

use ferromq_broker::popper::{
    self, ColdRead, ColdReader, ExtraInfo, PopError, PopRequest, PopSettings, Receipted,
};
use ferromq_broker::{Popper as Rules, TagFilter};
use ferromq_store::{GetResult, GetStatus, PutResult};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::codec::parse_addr;
use crate::errors::broker_error;
use crate::offsets::ConsumerOffsets;
use crate::store::Store;

/// (topic, queue id, next offset, tags code) of each message the rules stored.
type Stored = Vec<(String, i32, i64, i64)>;

/// (topic, queue id, start offset, queue offsets) of each queue a pop took from.
type Take = (String, i32, i64, Vec<i64>);

fn py_err(py: Python<'_>, e: PopError) -> PyErr {
    broker_error(py, e.code, e.remark)
}

/// The read queue count of a topic, asked of Python's `read_queues(topic) -> int | None`.
///
/// The rules run with the GIL released (they take the store's locks, which a data plane thread
/// may hold while it logs through Python); this takes it back for the call.
struct PyTopics(Py<PyAny>);

impl popper::Topics for PyTopics {
    fn read_queues(&self, topic: &str) -> Option<i32> {
        Python::attach(|py| self.0.bind(py).call1((topic,)).ok()?.extract().ok())
    }
}

/// Tiered storage under the pops, asked of Python's `ferromq.tiered.service.TieredService`:
/// `min_offset(topic, queue_id) -> int | None` and `pop_read(topic, queue_id, offset, max_count,
/// tag_codes) -> (found, body, queue_offsets, next_begin_offset, min_offset) | None`, which
/// raises when the bucket cannot be read now. Called with the GIL taken back (as `PyTopics`).
struct PyColdReader(Py<PyAny>);

/// What `pop_read` returns.
type ColdTuple = (bool, Vec<u8>, Vec<i64>, i64, i64);

impl ColdReader for PyColdReader {
    fn min_offset(&self, topic: &str, queue_id: i32) -> Option<i64> {
        Python::attach(|py| {
            let got = self
                .0
                .bind(py)
                .call_method1("min_offset", (topic, queue_id));
            got.ok()?.extract().ok()
        })
    }

    fn read(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        tag_codes: Option<&[i32]>,
    ) -> ColdRead {
        Python::attach(|py| {
            let codes = tag_codes.map(|c| c.to_vec());
            let args = (topic, queue_id, offset, max_count, codes);
            match self.0.bind(py).call_method1("pop_read", args) {
                Err(e) => {
                    log::warn!("tiered storage could not be read for {topic}/{queue_id}: {e}");
                    ColdRead::Unavailable
                }
                Ok(got) if got.is_none() => ColdRead::NotThere,
                Ok(got) => match got.extract::<ColdTuple>() {
                    Ok((found, body, queue_offsets, next_begin_offset, min_offset)) => {
                        ColdRead::Found(GetResult {
                            status: if found {
                                GetStatus::Found
                            } else {
                                GetStatus::NoMatchedMessage
                            },
                            next_begin_offset,
                            min_offset,
                            max_offset: next_begin_offset,
                            message_count: queue_offsets.len(),
                            body,
                            queue_offsets,
                            suggest_pulling_from_slave: false,
                        })
                    }
                    Err(e) => {
                        log::warn!("tiered storage answered a pop read wrongly: {e}");
                        ColdRead::Unavailable
                    }
                },
            }
        })
    }
}

fn note(stored: &mut Stored) -> impl FnMut(&PutResult) + '_ {
    |r: &PutResult| stored.push((r.topic.clone(), r.queue_id, r.queue_offset + 1, r.tags_code))
}

fn receipt(text: &str) -> PyResult<ExtraInfo> {
    ExtraInfo::parse(text).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "extraInfo {:?} is not a receipt (8 fields separated by spaces)",
            text.chars().take(200).collect::<String>()
        ))
    })
}

/// What a pop answers.
#[pyclass(frozen, get_all, module = "ferromq._store")]
pub struct Popped {
    pop_time: i64,
    invisible_time: i64,
    revive_qid: i32,
    body: Py<PyBytes>,
    count: usize,
    rest: i64,
    takes: Vec<Take>,
    start_offset_info: String,
    msg_offset_info: String,
    /// The checkpoints stored (their arrivals wake the timer).
    stored: Stored,
}

#[pyclass(frozen, module = "ferromq._store")]
pub struct Popper {
    pub(crate) rules: Arc<Rules>,
}

#[pymethods]
impl Popper {
    #[new]
    #[pyo3(signature = (store, offsets, *, broker_name, cluster, revive_queues, retry_v2, broker_addr))]
    fn new(
        store: &Store,
        offsets: &ConsumerOffsets,
        broker_name: String,
        cluster: String,
        revive_queues: i32,
        retry_v2: bool,
        broker_addr: &str,
    ) -> PyResult<Self> {
        let settings = PopSettings {
            broker_name,
            cluster,
            revive_queues,
            retry_v2,
            broker_addr: parse_addr(broker_addr)?,
        };
        Ok(Popper {
            rules: Arc::new(Rules::new(
                store.store.clone(),
                offsets.table.clone(),
                settings,
            )),
        })
    }

    /// Tiered storage to read below the queues' local min offsets (`PyColdReader`), or None.
    fn set_cold_reader(&self, reader: Option<Py<PyAny>>) {
        self.rules
            .set_cold_reader(reader.map(|r| Arc::new(PyColdReader(r)) as Arc<dyn ColdReader>));
    }

    #[getter]
    fn revive_topic(&self) -> &str {
        self.rules.revive_topic()
    }

    /// One pass over the pop's queues (see `ferromq_broker::popper`). `read_queues(topic)`
    /// gives a topic's read queue count (None: no such topic); `keep(properties)` (an SQL92
    /// filter) decides on each message of the topic; `priority_factor` is the group's
    /// `priority.factor` when the topic is a PRIORITY one.
    #[pyo3(signature = (
        group, topic, queue_id, max_msgs, invisible_time, init_mode, tag_codes, read_queues, *,
        order=false, blocked=Vec::new(), keep=None, priority_factor=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn pop(
        &self,
        py: Python<'_>,
        group: &str,
        topic: &str,
        queue_id: i32,
        max_msgs: usize,
        invisible_time: i64,
        init_mode: i32,
        tag_codes: Option<Vec<i32>>,
        read_queues: Bound<'_, PyAny>,
        order: bool,
        blocked: Vec<i32>,
        keep: Option<Bound<'_, PyAny>>,
        priority_factor: Option<u32>,
    ) -> PyResult<Popped> {
        let filter = tag_codes.map_or(TagFilter::Any, TagFilter::Codes);
        let req = PopRequest {
            group,
            topic,
            queue_id,
            max_msgs,
            invisible_time,
            init_mode,
            filter: &filter,
            order,
            blocked: &blocked,
            priority_factor,
        };
        let topics = PyTopics(read_queues.unbind());
        let keep = keep.map(Bound::unbind);
        let (popped, stored, failed) = py.detach(|| {
            let mut stored = Stored::new();
            let mut failed: Option<PyErr> = None;
            let mut keep_record = |record: &[u8]| -> bool {
                let Some(keep) = &keep else { return true };
                let kept = Python::attach(|py| {
                    let properties = properties_of(py, record)?;
                    keep.bind(py).call1((properties,))?.is_truthy()
                });
                kept.unwrap_or_else(|e| {
                    failed.get_or_insert(e);
                    false
                })
            };
            let keep_arg: Option<popper::Keep<'_>> = Some(&mut keep_record);
            let popped = self
                .rules
                .pop(&req, &topics, keep_arg, &mut note(&mut stored));
            (popped, stored, failed)
        });
        let popped = popped.map_err(|e| py_err(py, e))?;
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(Popped {
            pop_time: popped.pop_time,
            invisible_time: popped.invisible_time,
            revive_qid: popped.revive_qid,
            body: PyBytes::new(py, &popped.body).unbind(),
            count: popped.count,
            rest: popped.rest,
            start_offset_info: popped.start_offset_info(),
            msg_offset_info: popped.msg_offset_info(),
            takes: popped
                .takes
                .into_iter()
                .map(|t| (t.topic, t.queue_id, t.start_offset, t.queue_offsets))
                .collect(),
            stored,
        })
    }

    /// The group's committed offset in a queue, else (its first pop) where it starts, committed
    /// when `commit`.
    #[pyo3(signature = (group, topic, queue_id, init_mode, commit=true))]
    fn start_offset(
        &self,
        py: Python<'_>,
        group: &str,
        topic: &str,
        queue_id: i32,
        init_mode: i32,
        commit: bool,
    ) -> PyResult<i64> {
        py.detach(|| {
            self.rules
                .start_offset(group, topic, queue_id, init_mode, commit)
        })
        .map_err(|e| py_err(py, e))
    }

    /// Refuses (BrokerError, INVALID_PARAMETER) an invisible time a pop or a change may not ask
    /// for (`popper::check_invisible_time`).
    #[staticmethod]
    fn check_invisible_time(py: Python<'_>, invisible_time: i64) -> PyResult<()> {
        popper::check_invisible_time(invisible_time).map_err(|e| py_err(py, e))
    }

    /// Refuses (BrokerError with Java's code and remark) an ack or change of a queue or offset
    /// that does not exist.
    #[allow(clippy::too_many_arguments)]
    fn check_offset(
        &self,
        py: Python<'_>,
        read_queues: Bound<'_, PyAny>,
        group: &str,
        topic: &str,
        queue_id: i32,
        offset: i64,
        past_max: bool,
    ) -> PyResult<()> {
        let topics = PyTopics(read_queues.unbind());
        py.detach(|| {
            self.rules
                .check_offset(&topics, group, topic, queue_id, offset, past_max)
        })
        .map_err(|e| py_err(py, e))
    }

    /// ACK_MESSAGE of a (not orderly) popped message: the `ack` message stored.
    #[allow(clippy::too_many_arguments)]
    fn ack(
        &self,
        py: Python<'_>,
        read_queues: Bound<'_, PyAny>,
        group: &str,
        topic: &str,
        queue_id: i32,
        offset: i64,
        extra_info: &str,
    ) -> PyResult<Stored> {
        let a = Receipted {
            group,
            topic,
            queue_id,
            offset,
            receipt: receipt(extra_info)?,
        };
        let topics = PyTopics(read_queues.unbind());
        let mut stored = Stored::new();
        py.detach(|| self.rules.ack(&topics, &a, &mut note(&mut stored)))
            .map_err(|e| py_err(py, e))?;
        Ok(stored)
    }

    /// CHANGE_MESSAGE_INVISIBLETIME of a (not orderly) popped message: (popTime,
    /// invisibleTime, reviveQid) for the reply, and what was stored.
    #[allow(clippy::too_many_arguments)]
    fn change_invisible(
        &self,
        py: Python<'_>,
        read_queues: Bound<'_, PyAny>,
        group: &str,
        topic: &str,
        queue_id: i32,
        offset: i64,
        extra_info: &str,
        invisible_time: i64,
    ) -> PyResult<((i64, i64, i32), Stored)> {
        let a = Receipted {
            group,
            topic,
            queue_id,
            offset,
            receipt: receipt(extra_info)?,
        };
        let topics = PyTopics(read_queues.unbind());
        let mut stored = Stored::new();
        let changed = py
            .detach(|| {
                let mut note = note(&mut stored);
                self.rules
                    .change_invisible(&topics, &a, invisible_time, &mut note)
            })
            .map_err(|e| py_err(py, e))?;
        Ok((changed, stored))
    }

    /// A message of the revive topic (a batch ack's), due at `deliver_ms`.
    fn put_revive(
        &self,
        py: Python<'_>,
        queue_id: i32,
        tag: &str,
        body: &[u8],
        uniq_key: &str,
        deliver_ms: i64,
    ) -> PyResult<(String, i32, i64, i64)> {
        let r = py
            .detach(|| {
                self.rules
                    .put_revive(queue_id, tag, body, uniq_key, deliver_ms)
            })
            .map_err(|e| py_err(py, e))?;
        Ok((r.topic, r.queue_id, r.queue_offset + 1, r.tags_code))
    }
}

/// A record's properties as a dict (what an SQL92 filter reads).
fn properties_of<'py>(py: Python<'py>, record: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let view = ferromq_store::message::RecordView::parse(record, false)
        .map_err(|e| crate::errors::to_pyerr(py, e))?;
    let dict = PyDict::new(py);
    for (k, v) in ferromq_store::message::parse_properties(view.properties) {
        dict.set_item(k, v)?;
    }
    Ok(dict)
}

/// The retry topic of `group` popping `topic` (`popper::retry_topic`).
#[pyfunction]
#[pyo3(signature = (topic, group, v2=false))]
pub(crate) fn pop_retry_topic(topic: &str, group: &str, v2: bool) -> String {
    popper::retry_topic(topic, group, v2)
}

/// The kind of topic a receipt names: "0" normal, "1" v1 retry, "2" v2 retry.
#[pyfunction]
pub(crate) fn pop_retry_mark(topic: &str) -> &'static str {
    popper::retry_mark(topic)
}

/// The topic a receipt's message lies in (`popper::real_topic`).
#[pyfunction]
pub(crate) fn pop_real_topic(topic: &str, group: &str, mark: &str) -> String {
    popper::real_topic(topic, group, mark)
}

/// A receipt (`POP_CK`, an ack's `extraInfo`) as the rules read it and write it back; None when
/// they do not read it as one.
#[pyfunction]
pub(crate) fn pop_receipt(text: &str) -> Option<String> {
    ExtraInfo::parse(text).map(|r| r.to_string())
}

/// The `ck` message (body, UNIQ_KEY) the rules write for a pop (`popper::checkpoint_message`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(crate) fn pop_checkpoint<'py>(
    py: Python<'py>,
    topic: &str,
    group: &str,
    queue_id: i32,
    start_offset: i64,
    diffs: Vec<i64>,
    pop_time: i64,
    invisible_time: i64,
    broker_name: &str,
) -> (Bound<'py, PyBytes>, String) {
    let (body, key) = popper::checkpoint_message(
        topic,
        group,
        queue_id,
        start_offset,
        &diffs,
        pop_time,
        invisible_time,
        broker_name,
    );
    (PyBytes::new(py, &body), key)
}

/// The `ack` message (body, UNIQ_KEY) the rules write for an ack (`popper::ack_message`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(crate) fn pop_ack<'py>(
    py: Python<'py>,
    topic: &str,
    group: &str,
    queue_id: i32,
    ack_offset: i64,
    start_offset: i64,
    pop_time: i64,
    broker_name: &str,
) -> (Bound<'py, PyBytes>, String) {
    let (body, key) = popper::ack_message(
        topic,
        group,
        queue_id,
        ack_offset,
        start_offset,
        pop_time,
        broker_name,
    );
    (PyBytes::new(py, &body), key)
}
