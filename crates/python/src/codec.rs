//! The message format's free functions: hashes and tags codes, properties and the edits the send
//! pipeline makes to them, offsetMsgIds, and stored records decoded; and the remoting frame as
//! the data plane reads and writes it (for Python's codec, which is held to it by a test).

use std::net::SocketAddr;

use ferromq_remoting::frame::{self, Frame, FrameLength};
use ferromq_store::hash;
use ferromq_store::message::{self, iter_records};
use ferromq_store::send::{Edit, Rewrite};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::errors::IntoPy;

/// An `ip:port` argument as a socket address (ValueError when it is not one).
pub(crate) fn parse_addr(s: &str) -> PyResult<SocketAddr> {
    s.parse()
        .map_err(|_| PyValueError::new_err(format!("not an address with a port: {s:?}")))
}

/// What the send pipeline does to a message's properties: `edits`, each `(op, name, value)`
/// with op `set`, `default` (set if absent) or `remove` (value ignored), applied in order;
/// `drop_wait` drops WAIT (unless the message is delayed); `schedule` sends a delayed message
/// to the schedule topic. Built once and reused where the edits do not change.
#[pyclass(frozen, module = "ferromq._store")]
pub struct PropertyEdits {
    edits: Vec<Edit>,
    drop_wait: bool,
    schedule: bool,
}

impl PropertyEdits {
    pub(crate) fn rewrite(&self) -> Rewrite<'_> {
        Rewrite {
            edits: &self.edits,
            drop_wait: self.drop_wait,
            schedule: self.schedule,
        }
    }
}

#[pymethods]
impl PropertyEdits {
    #[new]
    #[pyo3(signature = (edits=Vec::new(), *, drop_wait=false, schedule=true))]
    fn new(
        py: Python<'_>,
        edits: Vec<(String, String, String)>,
        drop_wait: bool,
        schedule: bool,
    ) -> PyResult<Self> {
        let edits = edits
            .iter()
            .map(|(op, name, value)| Edit::new(op, name, value))
            .collect::<Result<_, _>>()
            .py_err(py)?;
        Ok(PropertyEdits {
            edits,
            drop_wait,
            schedule,
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "PropertyEdits({:?}, drop_wait={}, schedule={})",
            self.edits,
            if self.drop_wait { "True" } else { "False" },
            if self.schedule { "True" } else { "False" }
        )
    }
}

/// Java `String.hashCode` of `s`.
#[pyfunction]
pub(crate) fn java_hash(s: &str) -> i32 {
    hash::java_string_hash(s)
}

/// The tags of a TAG subscription expression (`*`, `TagA || TagB`), sorted and each once; None
/// when it takes every message; ValueError when it names no tag.
#[pyfunction]
pub(crate) fn parse_tag_expression(expression: &str) -> PyResult<Option<Vec<String>>> {
    ferromq_broker::pull::parse_tags(expression)
        .map_err(|_| PyValueError::new_err(format!("subscription {expression:?} has no tags")))
}

/// ConsumeQueue tags code of a TAGS value (0 for None or empty).
#[pyfunction]
#[pyo3(signature = (tags))]
pub(crate) fn tags_code(tags: Option<&str>) -> i64 {
    hash::tags_code(tags)
}

/// The value of property `name` in a properties string as Java's decoder reads it, or None.
#[pyfunction]
pub(crate) fn get_property<'a>(properties: &'a str, name: &str) -> Option<&'a str> {
    message::get_property(properties, name)
}

/// offsetMsgId of a store host (`ip:port`) and CommitLog offset.
#[pyfunction]
pub(crate) fn offset_msg_id(store_host: &str, physical_offset: i64) -> PyResult<String> {
    Ok(message::offset_msg_id(
        &parse_addr(store_host)?,
        physical_offset,
    ))
}

/// (store host `ip:port`, CommitLog offset) of an offsetMsgId.
#[pyfunction]
pub(crate) fn decode_offset_msg_id(py: Python<'_>, msg_id: &str) -> PyResult<(String, i64)> {
    let (host, offset) = message::decode_offset_msg_id(msg_id).py_err(py)?;
    Ok((host.to_string(), offset))
}

/// Decodes stored records packed back to back. Each is a tuple:
/// (topic, queue_id, queue_offset, physical_offset, flag, sys_flag, body_crc, born_timestamp,
///  born_host, store_timestamp, store_host, reconsume_times, prepared_transaction_offset,
///  properties, body, msg_id).
#[pyfunction]
#[pyo3(signature = (buf, check_crc=false))]
pub(crate) fn decode_records<'py>(
    py: Python<'py>,
    buf: &[u8],
    check_crc: bool,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for rec in iter_records(buf, check_crc) {
        let v = rec.py_err(py)?;
        let t = PyTuple::new(
            py,
            [
                v.topic.into_pyobject(py)?.into_any(),
                v.queue_id.into_pyobject(py)?.into_any(),
                v.queue_offset.into_pyobject(py)?.into_any(),
                v.physical_offset.into_pyobject(py)?.into_any(),
                v.flag.into_pyobject(py)?.into_any(),
                v.sys_flag.into_pyobject(py)?.into_any(),
                v.body_crc.into_pyobject(py)?.into_any(),
                v.born_timestamp.into_pyobject(py)?.into_any(),
                v.born_host.to_string().into_pyobject(py)?.into_any(),
                v.store_timestamp.into_pyobject(py)?.into_any(),
                v.store_host.to_string().into_pyobject(py)?.into_any(),
                v.reconsume_times.into_pyobject(py)?.into_any(),
                v.prepared_transaction_offset.into_pyobject(py)?.into_any(),
                v.properties.into_pyobject(py)?.into_any(),
                PyBytes::new(py, v.body).into_any(),
                v.offset_msg_id().into_pyobject(py)?.into_any(),
            ],
        )?;
        out.append(t)?;
    }
    Ok(out)
}

/// A properties string as Java's decoder reads it into its map (`name\x01value` joined by
/// `\x02`; entries without a name or a value dropped; a repeated name keeps its first position
/// and takes its last value): `ferromq_store::message::parse_properties`.
#[pyfunction]
pub(crate) fn decode_properties<'py>(
    py: Python<'py>,
    properties: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (name, value) in message::parse_properties(properties) {
        out.set_item(name, value)?;
    }
    Ok(out)
}

/// `props` (a mapping of names to values) as a client writes them
/// (`ferromq_store::message::append_client_properties`): an empty name or a None value left
/// out, any other value as its `str()`; ValueError for a name or value holding a separator.
#[pyfunction]
pub(crate) fn encode_properties<'py>(
    py: Python<'py>,
    props: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyString>> {
    let text = |o: Bound<'py, PyAny>| -> PyResult<PyBackedStr> {
        match o.cast_into::<PyString>() {
            Ok(s) => s.try_into(),
            Err(e) => e.into_inner().str()?.try_into(),
        }
    };
    let mut pairs: Vec<(PyBackedStr, Option<PyBackedStr>)> = Vec::new();
    let mut add = |k: Bound<'py, PyAny>, v: Bound<'py, PyAny>| -> PyResult<()> {
        let value = if v.is_none() { None } else { Some(text(v)?) };
        pairs.push((text(k)?, value));
        Ok(())
    };
    if let Ok(dict) = props.cast::<PyDict>() {
        for (k, v) in dict.iter() {
            add(k, v)?;
        }
    } else {
        for item in props.call_method0("items")?.try_iter()? {
            let (k, v) = item?.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>()?;
            add(k, v)?;
        }
    }
    let mut out = Vec::new();
    message::append_client_properties(&mut out, pairs.iter().map(|(k, v)| (&**k, v.as_deref())))
        .map_err(|name| {
            PyValueError::new_err(format!(
                "property {name:?} contains a RocketMQ separator character"
            ))
        })?;
    // Whole UTF-8 strings joined by ASCII separators.
    let text = std::str::from_utf8(&out).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyString::new(py, text))
}

/// The frame at the head of `buf` by its length prefix, as the data plane's reader judges it
/// (`ferromq_remoting::frame::frame_length`): its size, length prefix included, or None when
/// more bytes are needed; ValueError for a length outside 4..=`max_frame`.
#[pyfunction]
pub(crate) fn frame_length(buf: &[u8], max_frame: usize) -> PyResult<Option<usize>> {
    match frame::frame_length(buf, max_frame) {
        FrameLength::Whole(n) => Ok(Some(n)),
        FrameLength::Incomplete => Ok(None),
        FrameLength::Bad(len) => Err(PyValueError::new_err(format!(
            "frame length {len} outside 4..{max_frame}"
        ))),
    }
}

/// A JSON header as the data plane reads it.
type JsonHeader<'py> = (i32, i32, i32, i32, Option<Bound<'py, PyDict>>);
/// A frame as the data plane reads it.
type ReadFrame<'py> = (u8, Option<JsonHeader<'py>>, Bound<'py, PyBytes>);

/// A whole frame as the data plane reads it (`ferromq_remoting::frame`): (serialize type, the
/// JSON header's (code, opaque, flag, version, ext fields as text, or None when they are not an
/// object of scalars), or None when the plane does not read the header, body); None when the
/// header length overruns the frame.
#[pyfunction]
pub(crate) fn read_frame<'py>(py: Python<'py>, frame: &[u8]) -> PyResult<Option<ReadFrame<'py>>> {
    let Some(f) = Frame::new(frame) else {
        return Ok(None);
    };
    let header = match f.json_header() {
        None => None,
        Some(h) => {
            let ext = match h.ext() {
                None => None,
                Some(map) => {
                    let d = PyDict::new(py);
                    for (k, v) in map {
                        d.set_item(k, v)?;
                    }
                    Some(d)
                }
            };
            Some((h.code, h.opaque, h.flag, h.version, ext))
        }
    };
    Ok(Some((f.serialize_type, header, PyBytes::new(py, f.body()))))
}

/// The JSON reply frame the data plane writes (`ferromq_remoting::frame::json_reply_with_body`).
#[pyfunction]
#[pyo3(signature = (code, opaque, remark, ext, body=b"".as_slice()))]
pub(crate) fn json_reply<'py>(
    py: Python<'py>,
    code: i32,
    opaque: i32,
    remark: Option<&str>,
    ext: Vec<(String, String)>,
    body: &[u8],
) -> Bound<'py, PyBytes> {
    let ext: Vec<(&str, &str)> = ext.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut out = Vec::new();
    frame::json_reply_with_body(&mut out, code, opaque, remark, &ext, body);
    PyBytes::new(py, &out)
}
