//! The host↔kernel contract: every code and size that both the Rust side and the kernels know,
//! defined once here. The kernels see them as the `#define`s of the generated header
//! `common/abi.cuh` ([`header`]), which the kernel modules (`modules.rs`) hand to NVRTC; no
//! kernel source defines one of these names itself (a test checks it), so a code cannot drift
//! between the two sides.

/// Declares the table: one `pub(crate) const` per entry, and [`TABLE`] with every entry's name
/// and C literal, in order.
macro_rules! abi_table {
    ($($(#[$doc:meta])* $name:ident: $ty:ty = $value:expr;)*) => {
        $($(#[$doc])* pub(crate) const $name: $ty = $value;)*

        /// Every entry as (name, C literal), in declaration order.
        pub(crate) fn table() -> Vec<(&'static str, String)> {
            vec![$((stringify!($name), CLiteral::c_literal(&$name))),*]
        }
    };
}

/// How a constant is written in C.
trait CLiteral {
    fn c_literal(&self) -> String;
}

impl CLiteral for i32 {
    fn c_literal(&self) -> String {
        self.to_string()
    }
}

impl CLiteral for u32 {
    fn c_literal(&self) -> String {
        format!("{self:#x}u")
    }
}

impl CLiteral for usize {
    fn c_literal(&self) -> String {
        self.to_string()
    }
}

abi_table! {
    // How a tile value becomes a key (`TileKey`, common/keys.cuh `tile_key`).
    /// ‖r‖² + ‖c‖² − 2 r·c (euclidean, sqeuclidean, on centred rows).
    KEY_L2: i32 = 0;
    /// −r·c (inner_product).
    KEY_NEG_DOT: i32 = 1;
    /// 1 − r·c (cosine, correlation, on unit rows).
    KEY_ONE_MINUS: i32 = 2;
    /// The tile already holds the key (the SIMT metrics).
    KEY_DIRECT: i32 = 3;
    /// As KEY_L2, the tile's words holding int32 dot products (int8 tiles of u8 rows).
    KEY_L2_INT: i32 = 4;
    /// An empty list slot's index.
    NO_INDEX: u32 = u32::MAX;

    // The SIMT tile kernel's kinds (`TileKind::Simt`, distance/vector_tile.cu).
    /// Sum of absolute differences.
    VT_CITYBLOCK: i32 = 0;
    /// Largest absolute difference.
    VT_CHEBYSHEV: i32 = 1;
    /// Sum of absolute differences to the power p.
    VT_MINKOWSKI: i32 = 2;

    // Metrics of the exact f64 key (`numerics::plan::device_code`, `index::schedule::metric_code`,
    // common/exact.cuh `exact_key_of`).
    /// Squared euclidean (also euclidean's key).
    EX_SQEUCLIDEAN: i32 = 0;
    /// Negated inner product.
    EX_INNER_PRODUCT: i32 = 1;
    /// Cosine distance.
    EX_COSINE: i32 = 2;
    /// Correlation distance.
    EX_CORRELATION: i32 = 3;
    /// Cityblock.
    EX_CITYBLOCK: i32 = 4;
    /// Chebyshev.
    EX_CHEBYSHEV: i32 = 5;

    // How an exact key becomes the reported distance (`numerics::plan::distance_form`, finish/rerank.cu).
    /// The key itself.
    RR_KEY: i32 = 0;
    /// Its negation.
    RR_NEGATED: i32 = 1;
    /// The square root of max(key, 0).
    RR_SQRT: i32 = 2;
    /// Status of a row the rerank kernel left to the host.
    RR_NOT_DONE: u32 = u32::MAX;

    // Sizes.
    /// Values per thread between barriers of the running-list selection kernels: one float4
    /// (common/loads.cuh).
    ROW_GROUP: usize = 4;
    /// List size of the column-select kernel (select/cols.cu).
    SC_KP: usize = 32;
    /// Base items per tile of the fused filter (select/fused_filter.cu).
    FZ_BN: usize = 128;
    /// Rows per block of the graph's fused tile pair (select/pair_filter.cu).
    PF_BM: usize = 128;
    /// Columns per block of the fused tile pair (a quarter per warp).
    PF_BN: usize = 128;
    /// 32-bit words of the inner dimension per shared-memory slab of the fused tile pair.
    PF_BK: usize = 32;
    /// Slabs in flight in the fused tile pair.
    PF_STAGES: usize = 3;
    /// Values per group of a split row (distance/scaled_half.cu, fp16x3 plans): a group's f16
    /// his, then its los, 8 words each, one k-step of the fused tile pair.
    PF_SPLIT_GROUP: usize = 16;
    /// List and buffer slots of a row merged by merge_survivors (select/survivors.cu), together;
    /// its shared memory holds the list and the buffer's sort (a power of two).
    FZ_MERGE: usize = 4096;
    /// Longest list merge_survivors_warp merges in registers (select/survivors.cu); longer ones
    /// (the k-NN's fused pairs at k = 1000) merge a block a row.
    MS_LIST: usize = 256;
    /// Warps per block of exact_keys (finish/exact.cu): a lane per pair, so blocks of
    /// 32 · EK_WARPS threads take as many pairs.
    EK_WARPS: usize = 4;
    /// Pivots per SSS table at most (index/sss_search.cu).
    SSS_MAX_PIVOTS: usize = 64;
    /// Pattern chars per machine word: the longest query of the levenshtein kernel.
    LEV_W: usize = 64;
}

/// Dynamic shared memory of a fused tile pair's block (select/pair_filter.cu `PF_SHARED`): the
/// slabs in flight, `PF_BK + 4` words per row of each side.
pub(crate) const PF_SHARED_BYTES: usize = PF_STAGES * (PF_BM + PF_BN) * (PF_BK + 4) * 4;

/// The generated header `common/abi.cuh`: one `#define` per table entry.
pub(crate) fn header() -> String {
    let mut s = String::from(
        "// Generated by src/runtime/abi.rs: do not define these names elsewhere.\n#pragma once\n",
    );
    for (name, value) in table() {
        s.push_str(&format!("#define {name} {value}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::modules::SOURCES;

    #[test]
    fn header_defines_every_entry_once() {
        let h = header();
        let table = table();
        assert!(!table.is_empty());
        for (name, value) in &table {
            let line = format!("#define {name} {value}\n");
            assert_eq!(h.matches(&format!("#define {name} ")).count(), 1, "{name}");
            assert!(h.contains(&line), "{line}");
        }
        assert!(h.contains("#define NO_INDEX 0xffffffffu\n"));
    }

    #[test]
    fn no_kernel_source_defines_a_table_entry() {
        for (file, text) in SOURCES {
            for (name, _) in table() {
                for line in text.lines() {
                    let words: Vec<&str> = line.split_whitespace().collect();
                    let defined = match words.as_slice() {
                        ["#define", n, ..] | ["#", "define", n, ..] => n.split('(').next(),
                        _ => None,
                    };
                    let defines = defined == Some(name);
                    assert!(
                        !defines,
                        "{file} defines {name}, which src/runtime/abi.rs owns"
                    );
                    // `const int NAME = ...` or `constexpr ... NAME =` would mirror it too.
                    assert!(
                        !(line.contains("const") && line.contains(&format!(" {name} ="))),
                        "{file} declares {name}, which src/runtime/abi.rs owns"
                    );
                }
            }
        }
    }
}
