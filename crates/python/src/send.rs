//! `Sender`: the send rules of `ferromq-broker` ([`ferromq_broker::Sender`]) for the sends
//! Python decides, and the typed values it shares with the data plane (`TopicRoute`).

use std::sync::Arc;
use std::time::Duration;

use ferromq_broker::sender::{self, MessageType, Redirect, SendError, SendRequest, SendSettings};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::codec::parse_addr;
use crate::errors::IntoPy;
use crate::store::{HaMaster, Store};

/// What a send's topic allows (its queues, multi-tag flag and `message.type`).
#[pyclass(frozen, module = "ferromq._store")]
#[derive(Clone, Copy)]
pub struct TopicRoute {
    inner: sender::TopicRoute,
}

#[pymethods]
impl TopicRoute {
    #[new]
    #[pyo3(signature = (write_queues, read_queues, multi_tag=false, message_type="NORMAL"))]
    fn new(write_queues: i32, read_queues: i32, multi_tag: bool, message_type: &str) -> Self {
        TopicRoute {
            inner: sender::TopicRoute {
                write_queues,
                read_queues,
                multi_tag,
                message_type: MessageType::parse(message_type),
            },
        }
    }

    #[getter]
    fn write_queues(&self) -> i32 {
        self.inner.write_queues
    }

    #[getter]
    fn read_queues(&self) -> i32 {
        self.inner.read_queues
    }

    #[getter]
    fn multi_tag(&self) -> bool {
        self.inner.multi_tag
    }

    #[getter]
    fn message_type(&self) -> &'static str {
        self.inner.message_type.name()
    }
}

impl From<&TopicRoute> for sender::TopicRoute {
    fn from(r: &TopicRoute) -> Self {
        r.inner
    }
}

/// Where a send was stored and what its reply says.
#[pyclass(frozen, module = "ferromq._store")]
pub struct SendOutcome {
    stored: sender::Stored,
    reply_fields: Vec<(&'static str, String)>,
}

#[pymethods]
impl SendOutcome {
    /// The topic stored into (the schedule topic for a delayed message).
    #[getter]
    fn topic(&self) -> &str {
        &self.stored.topic
    }

    #[getter]
    fn queue_id(&self) -> i32 {
        self.stored.queue_id
    }

    /// The queue offset after the last message stored.
    #[getter]
    fn next_offset(&self) -> i64 {
        self.stored.next_offset
    }

    /// None for a batch.
    #[getter]
    fn tags_code(&self) -> Option<i64> {
        self.stored.tags_code
    }

    #[getter]
    fn messages(&self) -> u64 {
        self.stored.messages
    }

    #[getter]
    fn wrote_bytes(&self) -> u64 {
        self.stored.wrote_bytes
    }

    /// The light message queues the message was dispatched to, each with its next offset.
    #[getter]
    fn lmq_arrivals(&self) -> Vec<(String, i64)> {
        self.stored.lmq_arrivals.clone()
    }

    /// The reply's header fields (msgId, queueId, queueOffset, MSG_REGION, TRACE_ON).
    #[getter]
    fn reply_fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (name, value) in &self.reply_fields {
            out.set_item(*name, value)?;
        }
        Ok(out)
    }
}

/// The broker's send rules for one set of settings (made anew when any changes); the data plane
/// serves its sends with the same object (`DataPlane.serve_sends`).
#[pyclass(frozen, module = "ferromq._store")]
pub struct Sender {
    pub(crate) inner: Arc<ferromq_broker::Sender>,
}

#[pymethods]
impl Sender {
    #[new]
    #[pyo3(signature = (
        store, *, ha, sync_flush, sync_master, ack_alone, slave_timeout_ms, cluster, region, trace_on,
        reads_wait_for_replicas=false, broker_name="broker-a"
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        store: &Store,
        ha: Option<&HaMaster>,
        sync_flush: bool,
        sync_master: bool,
        ack_alone: bool,
        slave_timeout_ms: u64,
        cluster: &str,
        region: &str,
        trace_on: bool,
        reads_wait_for_replicas: bool,
        broker_name: &str,
    ) -> PyResult<Self> {
        let settings = SendSettings {
            store: store.store.clone(),
            ha: ha.map(|h| h.inner.clone()),
            sync_flush,
            sync_master,
            ack_alone,
            slave_timeout: Duration::from_millis(slave_timeout_ms),
            cluster: cluster.to_string(),
            broker_name: broker_name.to_string(),
            region: region.to_string(),
            trace_on,
            reads_wait_for_replicas,
        };
        let inner = ferromq_broker::Sender::new(settings).py_err(py)?;
        Ok(Sender {
            inner: Arc::new(inner),
        })
    }

    /// Stores a send by the rules (see `ferromq_broker::sender`). `dead_letter_topic` or
    /// `half` (a transaction half message) redirect it, as the broker decided. A refusal raises
    /// the `ferromq.errors` class with the code the data plane answers it with.
    #[pyo3(signature = (
        route, producer_group, topic, queue_id, body, properties, *, flag, sys_flag,
        born_timestamp, born_host, reconsume_times, batch, dead_letter_topic=None, half=false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        route: &TopicRoute,
        producer_group: &str,
        topic: &str,
        queue_id: i32,
        body: &[u8],
        properties: &str,
        flag: i32,
        sys_flag: i32,
        born_timestamp: i64,
        born_host: &str,
        reconsume_times: i32,
        batch: bool,
        dead_letter_topic: Option<&str>,
        half: bool,
    ) -> PyResult<SendOutcome> {
        let req = SendRequest {
            producer_group,
            topic,
            queue_id,
            sys_flag,
            born_timestamp,
            flag,
            properties,
            reconsume_times,
            batch,
        };
        let redirect = match (dead_letter_topic, half) {
            (Some(topic), _) => Some(Redirect::DeadLetter { topic }),
            (None, true) => Some(Redirect::Half),
            (None, false) => None,
        };
        let producer = parse_addr(born_host)?;
        let stored = py
            .detach(|| self.inner.put(&req, route.into(), redirect, body, producer))
            .map_err(|e| match e {
                SendError::Store(e) => crate::errors::to_pyerr(py, e),
                e => crate::errors::broker_error(py, e.code(), e.to_string()),
            })?;
        let reply_fields = self.inner.reply_fields(&stored);
        Ok(SendOutcome {
            stored,
            reply_fields,
        })
    }

    /// The reply code when it is known now (`arrived()` has then been called); else None, and
    /// `arrived()` then `answered(code)` are called later from the flush or HA thread (reach an
    /// event loop with `call_soon_threadsafe` inside them).
    fn settle(
        &self,
        py: Python<'_>,
        outcome: &SendOutcome,
        arrived: Py<PyAny>,
        answered: Py<PyAny>,
    ) -> Option<i32> {
        let call = |f: Py<PyAny>, args: Option<i32>| {
            Python::attach(|py| {
                let result = match args {
                    Some(code) => f.call1(py, (code,)),
                    None => f.call0(py),
                };
                if let Err(e) = result {
                    e.write_unraisable(py, None);
                }
            })
        };
        // Without the GIL: the flush thread may answer at once, and takes the GIL to do it.
        py.detach(|| {
            self.inner.settle_then(
                &outcome.stored,
                Box::new(move || call(arrived, None)),
                Box::new(move |code| call(answered, Some(code))),
            )
        })
    }
}
