//! Hands a [`ColumnBatch`] to Python as Arrow buffers, keyed by column name; `ferromq.spark.schema`
//! wraps them into a `pyarrow.RecordBatch` without touching rows. The buffers stay the vectors
//! Rust filled: Python reads them through the buffer protocol, nothing is copied.

use std::sync::Arc;

use ferromq_store::columnar::{ColumnBatch, ColumnFilter, VarColumn, ViewColumn};
use ferromq_store::mapped_file::MappedFile;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::errors::IntoPy;

/// Which records `Store.read_columns` / `decode_columns` keep (ranges `[min, max)`, times in ms).
#[pyclass(frozen, name = "RowFilter")]
pub struct RowFilter {
    pub inner: ColumnFilter,
}

#[pymethods]
impl RowFilter {
    #[new]
    #[pyo3(signature = (*, tags=None, keys=None, min_store_timestamp=None,
        max_store_timestamp=None, min_born_timestamp=None, max_born_timestamp=None,
        min_commitlog_offset=None, max_commitlog_offset=None, include_properties=true,
        body_views=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        tags: Option<Vec<String>>,
        keys: Option<Vec<String>>,
        min_store_timestamp: Option<i64>,
        max_store_timestamp: Option<i64>,
        min_born_timestamp: Option<i64>,
        max_born_timestamp: Option<i64>,
        min_commitlog_offset: Option<i64>,
        max_commitlog_offset: Option<i64>,
        include_properties: bool,
        body_views: bool,
    ) -> Self {
        RowFilter {
            inner: ColumnFilter {
                tags,
                keys,
                min_store_timestamp,
                max_store_timestamp,
                min_born_timestamp,
                max_born_timestamp,
                min_commitlog_offset,
                max_commitlog_offset,
                include_properties,
                body_views,
            },
        }
    }

    #[getter]
    fn include_properties(&self) -> bool {
        self.inner.include_properties
    }

    #[getter]
    fn body_views(&self) -> bool {
        self.inner.body_views
    }
}

/// Records the column decoders of this process looked at since it started (kept or not).
#[pyfunction]
pub fn records_examined() -> u64 {
    ferromq_store::columnar::records_examined()
}

/// Bytes lent to Python (e.g. `pyarrow.py_buffer`) through the buffer protocol, read-only: a
/// vector Rust filled, or the first bytes of a mapped CommitLog file (written bytes only), which
/// the object keeps mapped, even after retention deletes the file, until Python lets it go.
#[pyclass(frozen)]
pub struct ColumnBuffer {
    data: Lent,
}

enum Lent {
    Owned(Vec<u8>),
    Mapped(Arc<MappedFile>, usize),
}

impl ColumnBuffer {
    fn bytes(&self) -> &[u8] {
        match &self.data {
            Lent::Owned(v) => v,
            Lent::Mapped(file, len) => file.slice(0, *len).unwrap_or_default(),
        }
    }
}

#[pymethods]
impl ColumnBuffer {
    /// # Safety
    /// Called by Python with a valid `Py_buffer`; the bytes are not written again and live as
    /// long as the object, which the view holds a reference to.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: std::os::raw::c_int,
    ) -> PyResult<()> {
        let data = slf.get().bytes();
        let rc = unsafe {
            pyo3::ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                data.as_ptr() as *mut std::os::raw::c_void,
                data.len() as pyo3::ffi::Py_ssize_t,
                1,
                flags,
            )
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.bytes().len()
    }
}

fn bytes(py: Python<'_>, data: Vec<u8>) -> PyResult<Bound<'_, PyAny>> {
    Ok(Bound::new(
        py,
        ColumnBuffer {
            data: Lent::Owned(data),
        },
    )?
    .into_any())
}

/// (views, (data buffers, ...)): buffer 0 the copied values, then the mapped files'.
fn views(py: Python<'_>, c: ViewColumn) -> PyResult<Bound<'_, PyTuple>> {
    let mut buffers = vec![bytes(py, c.owned)?];
    for (file, len) in c.mapped {
        let lent = ColumnBuffer {
            data: Lent::Mapped(file, len),
        };
        buffers.push(Bound::new(py, lent)?.into_any());
    }
    PyTuple::new(
        py,
        [bytes(py, c.views)?, PyTuple::new(py, buffers)?.into_any()],
    )
}

/// (validity or None, null count, offsets, data)
fn var(py: Python<'_>, c: VarColumn) -> PyResult<Bound<'_, PyTuple>> {
    let validity = if c.null_count == 0 {
        py.None().into_bound(py)
    } else {
        bytes(py, c.validity)?
    };
    PyTuple::new(
        py,
        [
            validity,
            c.null_count.into_pyobject(py)?.into_any(),
            bytes(py, c.offsets)?,
            bytes(py, c.data)?,
        ],
    )
}

/// `{"rows": n, "body_bytes": n, name: buffers, ...}`; "properties" is (entry offsets, keys,
/// values) or None; "body" is (views, data buffers) with `body_views`.
pub fn to_py<'py>(
    py: Python<'py>,
    b: ColumnBatch,
    include_properties: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("rows", b.rows)?;
    d.set_item("body_bytes", b.body_bytes)?;
    d.set_item("topic", var(py, b.topic)?)?;
    d.set_item("queue_id", bytes(py, b.queue_id)?)?;
    d.set_item("queue_offset", bytes(py, b.queue_offset)?)?;
    d.set_item("commitlog_offset", bytes(py, b.commitlog_offset)?)?;
    d.set_item("msg_id", var(py, b.msg_id)?)?;
    d.set_item("uniq_key", var(py, b.uniq_key)?)?;
    d.set_item("tags", var(py, b.tags)?)?;
    d.set_item("keys", var(py, b.keys)?)?;
    if include_properties {
        let props = PyTuple::new(
            py,
            [
                bytes(py, b.property_offsets)?,
                var(py, b.property_keys)?.into_any(),
                var(py, b.property_values)?.into_any(),
            ],
        )?;
        d.set_item("properties", props)?;
    } else {
        d.set_item("properties", py.None())?;
    }
    match b.body_views {
        Some(v) => d.set_item("body", views(py, v)?)?,
        None => d.set_item("body", var(py, b.body)?)?,
    }
    d.set_item("born_timestamp", bytes(py, b.born_timestamp)?)?;
    d.set_item("store_timestamp", bytes(py, b.store_timestamp)?)?;
    d.set_item("born_host", var(py, b.born_host)?)?;
    d.set_item("store_host", var(py, b.store_host)?)?;
    d.set_item("reconsume_times", bytes(py, b.reconsume_times)?)?;
    d.set_item("sys_flag", bytes(py, b.sys_flag)?)?;
    d.set_item("flag", bytes(py, b.flag)?)?;
    Ok(d)
}

/// Packed records (a pull body) decoded into Arrow column buffers, as `Store.read_columns`.
#[pyfunction]
pub(crate) fn decode_columns<'py>(
    py: Python<'py>,
    buf: &[u8],
    filter: &RowFilter,
) -> PyResult<Bound<'py, PyDict>> {
    let include_properties = filter.inner.include_properties;
    let filter = filter.inner.clone();
    let batch = py
        .detach(|| ferromq_store::columnar::decode_columns(buf, filter))
        .py_err(py)?;
    to_py(py, batch, include_properties)
}

/// What tiered storage keeps beside a sealed CommitLog file (`ferromq_store::segment_index`):
/// (end, min store time, max store time, runs as (topic, queue id, first offset, count, unit
/// index), units, keys).
#[pyfunction]
pub(crate) fn index_segment<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    start: i64,
) -> PyResult<SegmentTuple<'py>> {
    let index = py
        .detach(|| ferromq_store::segment_index::index_segment_file(&path, start))
        .py_err(py)?;
    let runs = index
        .runs
        .into_iter()
        .map(|r| (r.topic, r.queue_id, r.first, r.count, r.unit_index))
        .collect();
    Ok((
        index.end,
        index.min_store_timestamp,
        index.max_store_timestamp,
        runs,
        PyBytes::new(py, &index.units),
        PyBytes::new(py, &index.keys),
    ))
}

type SegmentTuple<'py> = (
    i64,
    i64,
    i64,
    Vec<(String, i32, i64, usize, usize)>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
);
