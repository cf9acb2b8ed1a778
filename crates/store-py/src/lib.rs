use pyo3::prelude::*;
#[pymodule]
fn _store(_m: &Bound<PyModule>) -> PyResult<()> {
    Ok(())
}
