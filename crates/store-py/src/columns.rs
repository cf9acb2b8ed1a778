//! Hands a [`ColumnBatch`] to Python as Arrow buffers, keyed by column name; `ferromq.spark.schema`
//! wraps them into a `pyarrow.RecordBatch` without touching rows. The buffers stay the vectors
//! Rust filled: Python reads them through the buffer protocol, nothing is copied.

use ferromq_store::columnar::{ColumnBatch, ColumnFilter, VarColumn};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

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
        min_commitlog_offset=None, max_commitlog_offset=None, include_properties=true))]
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
            },
        }
    }

    #[getter]
    fn include_properties(&self) -> bool {
        self.inner.include_properties
    }
}

/// Records the column decoders of this process looked at since it started (kept or not).
#[pyfunction]
pub fn records_examined() -> u64 {
    ferromq_store::columnar::records_examined()
}

/// Bytes owned by Rust, lent to Python (e.g. `pyarrow.py_buffer`) through the buffer protocol.
#[pyclass(frozen)]
pub struct ColumnBuffer {
    data: Vec<u8>,
}

#[pymethods]
impl ColumnBuffer {
    /// # Safety
    /// Called by Python with a valid `Py_buffer`; the data is immutable and lives as long as
    /// the object, which the view holds a reference to.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: std::os::raw::c_int,
    ) -> PyResult<()> {
        let data = &slf.get().data;
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
        self.data.len()
    }
}

fn bytes(py: Python<'_>, data: Vec<u8>) -> PyResult<Bound<'_, PyAny>> {
    Ok(Bound::new(py, ColumnBuffer { data })?.into_any())
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

/// `{"rows": n, name: buffers, ...}`; "properties" is (entry offsets, keys, values) or None.
pub fn to_py<'py>(
    py: Python<'py>,
    b: ColumnBatch,
    include_properties: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("rows", b.rows)?;
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
    d.set_item("body", var(py, b.body)?)?;
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
