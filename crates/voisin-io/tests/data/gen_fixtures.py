"""Writes the small HDF5 and .npy fixtures of the voisin-io tests with the real h5py and NumPy,
so the Rust readers are checked against files made by the tools users have (not by our own
writers). Run from this folder: `python3 gen_fixtures.py` (needs h5py and numpy).

Values follow one formula, mirrored in tests/common/mod.rs, so tests compute what to expect:
value(i, j) = ((7 * i + 3 * j) % 11) - 5 + 0.5 * (j % 2), exact in f16, f32 and f64."""

import h5py
import numpy as np


def values(n, d):
    i = np.arange(n)[:, None]
    j = np.arange(d)[None, :]
    return ((7 * i + 3 * j) % 11) - 5 + 0.5 * (j % 2)


def bytes_u8(n, d):
    i = np.arange(n)[:, None]
    j = np.arange(d)[None, :]
    return ((7 * i + 3 * j) % 256).astype(np.uint8)


def ann(path, libver="earliest", **kw):
    with h5py.File(path, "w", libver=libver) as f:
        f.attrs["distance"] = "euclidean"
        f.create_dataset("train", data=values(20, 5).astype(np.float32), **kw)
        f.create_dataset("test", data=values(3, 5).astype(np.float32), **kw)
        f.create_dataset("neighbors", data=np.zeros((3, 4), dtype=np.int32))
        f.create_dataset("distances", data=np.zeros((3, 4), dtype=np.float32))


ann("ann.hdf5")
ann("ann_latest.h5", libver="latest")
ann("ann_gzip.hdf5", chunks=(2, 5), compression="gzip", shuffle=True)

with h5py.File("train_u8.hdf5", "w") as f:
    f.create_dataset("train", data=bytes_u8(6, 4))
    f.create_dataset("test", data=values(2, 4).astype(np.float64))  # exact in f32
with h5py.File("others.h5", "w") as f:
    f.create_dataset("vectors", data=values(4, 2).astype(np.float32))
    f.create_dataset("queries", data=values(2, 2).astype(np.float32))
with h5py.File("odd.h5", "w") as f:
    f.create_dataset("train", data=np.zeros((2, 3, 4), dtype=np.float32))
    f.create_dataset("test", data=np.full((2, 2), 0.1, dtype=np.float64))

# `train` as a soft link within the file (old and new group formats, with a loop beside it),
# and as an external link.
for path, libver in [("soft_v1.hdf5", "earliest"), ("soft_v2.h5", "latest")]:
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("data/base", data=values(20, 5).astype(np.float32))
        f.create_dataset("test", data=values(3, 5).astype(np.float32))
        f["train"] = h5py.SoftLink("/data/base")
        f["loop"] = h5py.SoftLink("/loop")
with h5py.File("external.hdf5", "w") as f:
    f["train"] = h5py.ExternalLink("ann.hdf5", "/train")
    f.create_dataset("test", data=values(3, 5).astype(np.float32))

# .npy written by NumPy itself.
v = values(5, 3)
np.save("c_f32.npy", v.astype(np.float32))
np.save("f_f32.npy", np.asfortranarray(v.astype(np.float32)))
np.save("c_f16.npy", v.astype(np.float16))
np.save("be_f32.npy", v.astype(">f4"))
np.save("f_be_f16.npy", np.asfortranarray(v.astype(">f2")))
np.save("c_u8.npy", bytes_u8(5, 3))
np.save("c_f64.npy", v)
np.save("c_i16.npy", (v * 2).astype(np.int16))
np.save("one_d.npy", v[:, 0].astype(np.float32))
np.save("three_d.npy", np.zeros((2, 2, 2), dtype=np.float32))
np.save("bool.npy", np.zeros((2, 2), dtype=bool))
with open("v2_f32.npy", "wb") as fh:
    np.lib.format.write_array(fh, v.astype(np.float32), version=(2, 0))

# Types the reader refuses by name.
with h5py.File("f16.h5", "w") as f:
    f.create_dataset("train", data=values(2, 2).astype(np.float16))
    f.create_dataset("test", data=np.zeros((2, 2), dtype=np.int64))

# .npz archives (stored and deflated), numeric CSV, and an ann-benchmarks file declaring
# the angular distance.
np.savez("arrays.npz", train=values(5, 3).astype(np.float32), test=values(2, 3))
np.savez_compressed("one_z.npz", emb=values(5, 3).astype(np.float32))
np.savetxt("c_f32.csv", values(5, 3), delimiter=",", header="a,b,c", comments="")
with h5py.File("angular.hdf5", "w") as f:
    f.attrs["distance"] = "angular"
    f.create_dataset("train", data=values(20, 5).astype(np.float32))
    f.create_dataset("test", data=values(3, 5).astype(np.float32))

# Parquet written by pyarrow (snappy, its default): a fixed-size-list column, a list column of
# float64 beside a label column, and one column per dimension.
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

v = values(5, 3)
pq.write_table(pa.table({"emb": pa.FixedSizeListArray.from_arrays(
    pa.array(v.astype(np.float32).ravel()), 3)}), "fixed_list.parquet")
pq.write_table(pa.table({"id": pa.array(range(5)), "vec": pa.array(list(v)),
                         "other": pa.array([list(r) for r in v])}), "two_lists.parquet")
pq.write_table(pa.table({f"c{j}": pa.array(v[:, j]) for j in range(3)}), "columns.parquet")

# An ann-benchmarks layout whose `distance` attribute is an integer, not a metric name.
with h5py.File("int_distance.hdf5", "w") as f:
    f.attrs["distance"] = 3
    f.create_dataset("train", data=values(20, 5).astype(np.float32))
    f.create_dataset("test", data=values(3, 5).astype(np.float32))
