//! The element type a set's rows keep on the device ([`Storage`]): the kernels' `VOISIN_ELEM`
//! code, the bytes of a value and the stride of a row. The kernel registry compiles one module
//! per storage; the layers above choose which one a search uses.

use voisin::data::ElemType;

/// The element type a set's rows have on the device, which the exact-key kernels convert
/// (kernels/common/elem.cuh, `VOISIN_ELEM` = [`Storage::code`]) and the f16/bf16 tiles read as
/// they are. Both sides of a search share it. docs/design/tensor-core-inputs.md.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Storage {
    /// f32 values (f32 sets, f64 sets rounded, and pairs of two element types, converted).
    #[default]
    F32,
    /// The stored f16 values, as they are.
    F16,
    /// The stored bf16 values, as they are.
    Bf16,
    /// The stored u8 values, as they are.
    U8,
}

impl Storage {
    /// The kernels' `VOISIN_ELEM` code.
    pub fn code(self) -> i32 {
        match self {
            Storage::F32 => 0,
            Storage::F16 => 1,
            Storage::Bf16 => 2,
            Storage::U8 => 3,
        }
    }

    /// The storage of a search of a base stored as `base` for queries stored as `queries`
    /// (the same for a graph): their common element type where the device keeps it as it is,
    /// f32 otherwise (an exact-key kernel reads both sides as one type).
    pub fn of_pair(base: ElemType, queries: ElemType) -> Storage {
        match base {
            _ if base != queries => Storage::F32,
            ElemType::F16 => Storage::F16,
            ElemType::Bf16 => Storage::Bf16,
            ElemType::U8 => Storage::U8,
            ElemType::F32 | ElemType::F64 => Storage::F32,
        }
    }

    /// Bytes per stored value.
    pub fn bytes(self) -> usize {
        match self {
            Storage::F32 => 4,
            Storage::F16 | Storage::Bf16 => 2,
            Storage::U8 => 1,
        }
    }

    /// Values from the start of one stored row of `d` values to the next: f16 and bf16 rows,
    /// which the tiles may read as they are, start on 16 bytes (cuBLAS's tensor-core kernels
    /// want it of the leading dimension: an f16 GEMM of 16384² × 15876 ran at 272 TFLOP/s with
    /// rows 15876 apart on the H100); the others are dense.
    pub fn row_stride(self, d: usize) -> usize {
        match self {
            Storage::F16 | Storage::Bf16 => d.next_multiple_of(8),
            Storage::F32 | Storage::U8 => d,
        }
    }
}
