//! Arrays of other frameworks (PyTorch, CuPy, JAX, anything with `__dlpack__`) as vector
//! storage, through the DLPack protocol (<https://dmlc.github.io/dlpack/latest/>).
//!
//! Host memory (`kDLCPU`, and CUDA's page-locked host memory `kDLCUDAHost`) of a stored type
//! (float32, float16, bfloat16, uint8) in row-major order is read in place: the capsule is
//! kept alive with the rows, and the producer's own destructor frees the tensor when the last
//! reader is gone (a capsule nobody renamed is released by its producer, as the protocol
//! says). Strided rows and int8 (no engine stores int8) are copied, and the copy is counted in
//! the bytes the bindings moved. Device memory is not read here: the Python half brings a CUDA
//! tensor to the host through its framework first and counts those bytes (the CUDA engine
//! uploads host rows; docs/design/python-dlpack.md says what a device-resident base needs).

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use half::{bf16, f16};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use voisin::data::{Buffer, VectorData};
use voisin::VectorSet;

use crate::PyRows;

/// `DLDevice`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Device {
    device_type: i32,
    device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
#[derive(Clone, Copy)]
struct DataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
struct Tensor {
    data: *mut c_void,
    device: Device,
    ndim: i32,
    dtype: DataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

/// `DLManagedTensor` (the capsule `"dltensor"` of DLPack before 1.0, which every producer
/// gives when `__dlpack__` is called without `max_version`).
#[repr(C)]
struct Managed {
    tensor: Tensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut Managed)>,
}

const CPU: i32 = 1;
const CUDA_HOST: i32 = 3;
const INT: u8 = 0;
const UINT: u8 = 1;
const FLOAT: u8 = 2;
const BFLOAT: u8 = 4;

const CAPSULE: &CStr = c"dltensor";

/// A 2-D host tensor's vectors and the bytes copied to read them (0 when read in place).
pub fn vectors(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<(VectorSet, u64)> {
    let capsule = obj.call_method0("__dlpack__")?;
    let cap = capsule.cast::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what}: __dlpack__ did not return a DLPack capsule"
        ))
    })?;
    // SAFETY: a capsule named "dltensor" holds a `DLManagedTensor` (the protocol); the name
    // was checked by the call, and the tensor lives at least as long as the capsule.
    let managed = unsafe {
        let p = pyo3::ffi::PyCapsule_GetPointer(cap.as_ptr(), CAPSULE.as_ptr());
        if p.is_null() {
            return Err(PyErr::take(obj.py()).unwrap_or_else(|| {
                PyTypeError::new_err(format!("{what}: not an unused DLPack capsule"))
            }));
        }
        &*(p as *const Managed)
    };
    let t = &managed.tensor;
    if !matches!(t.device.device_type, CPU | CUDA_HOST) {
        return Err(PyValueError::new_err(format!(
            "{what}: DLPack device type {} is not host memory",
            t.device.device_type
        )));
    }
    if t.ndim != 2 {
        return Err(PyValueError::new_err(format!(
            "{what}: expected a 2-D tensor (items x dimension), got {}-D",
            t.ndim
        )));
    }
    // SAFETY: `shape` (and `strides` when not null) hold `ndim` values.
    let (shape, strides) = unsafe {
        let shape = std::slice::from_raw_parts(t.shape, 2);
        let strides = (!t.strides.is_null()).then(|| std::slice::from_raw_parts(t.strides, 2));
        ([shape[0], shape[1]], strides.map(|s| [s[0], s[1]]))
    };
    let (n, d) = (shape[0] as usize, shape[1] as usize);
    if n == 0 {
        return Err(PyValueError::new_err(format!(
            "{what}: empty (0 rows of dimension {d})"
        )));
    }
    if d == 0 {
        return Err(PyValueError::new_err(format!(
            "{what}: vectors have dimension 0"
        )));
    }
    // Row-major and dense: strides absent, or those of a C-ordered array (a stride of a
    // dimension of length 1 says nothing).
    let dense = strides.is_none_or(|[s0, s1]| (d == 1 || s1 == 1) && (n == 1 || s0 == d as i64));
    // SAFETY: the producer's data pointer plus its byte offset is the first value.
    let base = unsafe { (t.data as *const u8).add(t.byte_offset as usize) };
    let view = View {
        capsule: &capsule,
        base,
        n,
        d,
        strides: strides.unwrap_or([d as i64, 1]),
        dense,
    };
    let dt = t.dtype;
    if dt.lanes != 1 {
        return Err(unsupported(what, dt));
    }
    let (data, copied) = match (dt.code, dt.bits) {
        (FLOAT, 32) => view.rows::<f32>(VectorData::F32),
        (FLOAT, 16) => view.rows::<f16>(VectorData::F16),
        (BFLOAT, 16) => view.rows::<bf16>(VectorData::Bf16),
        (UINT, 8) => view.rows::<u8>(VectorData::U8),
        // No engine stores int8: its values, exact in f32, are copied as f32.
        (INT, 8) => {
            let values: Vec<f32> = view.values::<i8>().into_iter().map(f32::from).collect();
            let bytes = (values.len() * 4) as u64;
            (VectorData::F32(Buffer::Owned(values)), bytes)
        }
        _ => return Err(unsupported(what, dt)),
    };
    let set = VectorSet::new(n, d, data).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((set, copied))
}

fn unsupported(what: &str, dt: DataType) -> PyErr {
    let name = match dt.code {
        INT => "int",
        UINT => "uint",
        FLOAT => "float",
        BFLOAT => "bfloat",
        _ => "type code ",
    };
    PyTypeError::new_err(format!(
        "{what}: DLPack dtype {name}{}{} is not read in place (float32, float16, bfloat16, \
         uint8, int8)",
        dt.bits,
        if dt.lanes == 1 {
            String::new()
        } else {
            format!(" x{}", dt.lanes)
        }
    ))
}

/// The values of a 2-D host tensor, before their type is known.
struct View<'a, 'py> {
    capsule: &'a Bound<'py, PyAny>,
    base: *const u8,
    n: usize,
    d: usize,
    /// In values, not bytes (DLPack's convention).
    strides: [i64; 2],
    dense: bool,
}

impl View<'_, '_> {
    /// The rows as storage of `T`: in place when dense and aligned, else copied (with the
    /// bytes copied).
    fn rows<T: bytemuck::Pod>(&self, wrap: fn(Buffer<T>) -> VectorData) -> (VectorData, u64) {
        let ptr = self.base as *const T;
        if self.dense && (ptr as usize).is_multiple_of(align_of::<T>()) {
            let rows = PyRows::new(self.capsule.clone().unbind(), ptr, self.n * self.d);
            return (wrap(Buffer::Shared(Arc::new(rows))), 0);
        }
        let values = self.values::<T>();
        let bytes = std::mem::size_of_val(values.as_slice()) as u64;
        (wrap(Buffer::Owned(values)), bytes)
    }

    /// Every value in row-major order, copied (unaligned and strided reads allowed).
    fn values<T: bytemuck::Pod>(&self) -> Vec<T> {
        let [s0, s1] = self.strides;
        let mut out = Vec::with_capacity(self.n * self.d);
        for r in 0..self.n as i64 {
            for c in 0..self.d as i64 {
                let at = (r * s0 + c * s1) as isize * size_of::<T>() as isize;
                // SAFETY: the producer's shape and strides describe memory it owns, alive
                // while the capsule is; unaligned reads are allowed.
                out.push(unsafe { std::ptr::read_unaligned(self.base.offset(at) as *const T) });
            }
        }
        out
    }
}
