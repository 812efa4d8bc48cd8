"""Arrays of other frameworks through DLPack (``__dlpack__``): host tensors read in place
(checked by the bytes copied, in the stats), bfloat16 and int8, strided tensors, GPU tensors
brought to the host and counted, results in the caller's framework.

The producers here are NumPy's own ``__dlpack__`` behind a wrapper that is not an ndarray, and
a small ctypes producer of DLPack capsules for what NumPy cannot give (bfloat16, pinned host
memory, device memory); PyTorch, CuPy and JAX are tested where they are installed."""

import ctypes

import numpy as np
import pytest

import voisin


class Tensor:
    """Another framework's tensor, as voisin sees it: ``__dlpack__``, ``__dlpack_device__``,
    ``shape`` and ``dtype``, over a NumPy array."""

    def __init__(self, a, device=(1, 0)):
        self.a, self.shape, self.dtype, self.device = a, a.shape, a.dtype, device
        self.calls = 0

    def __dlpack__(self, stream=None, **kw):
        self.calls += 1
        if self.device[0] != 1 and kw.get("dl_device") != (1, 0):
            raise BufferError("this tensor is on the device")
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.device


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Capsules:
    """A DLPack producer over raw bytes: any type code (bfloat16 is code 4), strides in
    elements, a byte offset and a device type. It owns the memory; keep it alive while the
    result of a call on it is used (its capsules have no destructor)."""

    def __init__(self, raw, shape, code, bits, strides=None, device=1, offset=0, dtype="x"):
        self.raw = np.ascontiguousarray(raw).view(np.uint8).ravel()
        self.shape_c = (ctypes.c_int64 * 2)(*shape)
        self.strides_c = None if strides is None else (ctypes.c_int64 * 2)(*strides)
        t = _DLTensor(self.raw.ctypes.data, _DLDevice(device, 0), 2, _DLDataType(code, bits, 1),
                      self.shape_c, self.strides_c, offset)
        self.managed = _DLManaged(t, None, None)
        self.shape, self.dtype = tuple(shape), dtype

    def __dlpack__(self, stream=None, **kw):
        return _capsule_new(ctypes.addressof(self.managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (self.managed.dl_tensor.device.device_type, 0)


def bf16_bits(x):
    """The bfloat16 nearest each float32 (round to nearest even), as uint16 bits."""
    b = np.asarray(x, np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def test_host_tensors_are_read_in_place(rng):
    X = rng.normal(size=(500, 12)).astype(np.float32)
    Q = rng.normal(size=(30, 12)).astype(np.float32)
    want = voisin.knn(X, Q, 5, device="cpu")
    for dtype in (np.float32, np.float16, np.uint8):
        base = (X * 10 + 40).astype(dtype)
        queries = (Q * 10 + 40).astype(dtype)
        ref = voisin.knn(base, queries, 5, device="cpu")
        d, i, stats = voisin.knn(Tensor(base), Tensor(queries), 5, device="cpu", stats=True)
        np.testing.assert_array_equal(i, ref[1])
        np.testing.assert_array_equal(d, ref[0])
        assert stats["host_copy_bytes"] == 0 and stats["device_to_host_bytes"] == 0
    d, i = voisin.knn(Tensor(X), Q, 5, device="cpu")
    np.testing.assert_array_equal(i, want[1])
    # the tensor's memory is the base of a one-shot call: a change shows (a fitted index may
    # keep prepared tiles of its own, docs/design/prepared-base.md)
    t = Tensor(X.copy())
    assert voisin.knn(t, X[:1], 1, device="cpu")[1].item() == 0
    t.a[0] += 100.0
    assert voisin.knn(t, X[:1], 1, device="cpu")[1].item() != 0


def test_conversions_are_counted(rng):
    X = rng.normal(size=(200, 6)).astype(np.float32)
    *_, s = voisin.knn(X, X[:5], 3, device="cpu", stats=True)
    assert s["host_copy_bytes"] == 0 and s["device"].startswith("cpu")
    F = np.asfortranarray(X)  # copied by the extension
    *_, s = voisin.knn(F, X[:5], 3, device="cpu", stats=True)
    assert s["host_copy_bytes"] == X.nbytes
    I = (X * 100).astype(np.int32)  # converted to float32 here
    *_, s = voisin.knn(I, I[:5], 3, device="cpu", stats=True)
    assert s["host_copy_bytes"] == I.nbytes + I[:5].nbytes
    g, s = voisin.knn_graph(Tensor(X), 3, device="cpu", output="csr", stats=True)
    assert s["host_copy_bytes"] == 0 and g.shape == (200, 200)


def test_bfloat16_and_int8_tensors(rng):
    X = rng.normal(size=(300, 8)).astype(np.float32)
    bits = bf16_bits(X)
    values = (bits.astype(np.uint32) << 16).view(np.float32)  # the bfloat16 values
    producer = Capsules(bits, X.shape, code=4, bits=16, dtype="bfloat16")
    d, i, s = voisin.knn(producer, values[:20], 4, device="cpu", stats=True)
    ref = voisin.knn(values, values[:20], 4, device="cpu")
    np.testing.assert_array_equal(i, ref[1])
    np.testing.assert_array_equal(d, ref[0])
    assert s["host_copy_bytes"] == 0
    I8 = rng.integers(-128, 128, size=(300, 8)).astype(np.int8)
    d, i, s = voisin.knn(Tensor(I8), I8[:20].astype(np.float32), 4, device="cpu", stats=True)
    ref = voisin.knn(I8.astype(np.float32), I8[:20].astype(np.float32), 4, device="cpu")
    np.testing.assert_array_equal(i, ref[1])
    # no engine stores int8: its values are copied as float32
    assert s["host_copy_bytes"] == I8.size * 4


def test_strided_offset_and_pinned_tensors(rng):
    X = rng.normal(size=(100, 10)).astype(np.float32)
    ref = voisin.knn(X[:, ::2], X[:7, ::2], 3, device="cpu")
    # every other column: strides (10, 2), copied
    strided = Capsules(X, (100, 5), code=2, bits=32, strides=(10, 2), dtype="float32")
    d, i, s = voisin.knn(strided, X[:7, ::2], 3, device="cpu", stats=True)
    np.testing.assert_array_equal(i, ref[1])
    assert s["host_copy_bytes"] == (100 + 7) * 5 * 4  # the strided queries too
    # a byte offset (rows 10..99), and CUDA's page-locked host memory (kDLCUDAHost): in place
    rows = Capsules(X, (90, 10), code=2, bits=32, offset=10 * 10 * 4, device=3,
                    dtype="float32")
    d, i, s = voisin.knn(rows, X[10:17], 3, device="cpu", stats=True)
    np.testing.assert_array_equal(i[:, 0], np.arange(7))
    assert s["host_copy_bytes"] == 0


def test_gpu_tensors_are_brought_to_the_host_and_counted(rng):
    X = rng.normal(size=(150, 4)).astype(np.float32)
    on_gpu = Tensor(X, device=(2, 0))
    d, i, s = voisin.knn(on_gpu, X[:5], 3, device="cpu", stats=True)
    np.testing.assert_array_equal(i, voisin.knn(X, X[:5], 3, device="cpu")[1])
    assert s["device_to_host_bytes"] == X.nbytes


def test_bad_tensors(rng):
    X = rng.normal(size=(10, 3)).astype(np.float32)
    with pytest.raises(ValueError, match="base: expected a 2-D array"):
        voisin.knn(Tensor(X.ravel()), X, 1, device="cpu")
    with pytest.raises(ValueError, match=r"base: empty \(0 rows"):
        voisin.knn(Tensor(X[:0]), X, 1, device="cpu")
    with pytest.raises(TypeError, match="base: unsupported dtype float8"):
        voisin.knn(Capsules(X, (10, 3), code=2, bits=8, dtype="float8"), X, 1, device="cpu")
    # a tensor whose element type is not the one its dtype names
    with pytest.raises(TypeError, match="base: DLPack dtype float8 is not read in place"):
        voisin.knn(Capsules(X, (10, 3), code=2, bits=8, dtype="float32"), X, 1, device="cpu")
    with pytest.raises(ValueError, match="base: row 2, column 1 holds NaN"):
        Y = X.copy()
        Y[2, 1] = np.nan
        voisin.knn(Tensor(Y), X, 1, device="cpu")


def test_output_in_the_callers_framework(rng):
    X = rng.normal(size=(50, 4)).astype(np.float32)
    d, i = voisin.knn(Tensor(X), X[:3], 2, device="cpu", output="input")
    assert isinstance(d, np.ndarray)  # the wrapper's framework is this test module, not one
    with pytest.raises(ValueError, match="output must be one of"):
        voisin.knn(X, X, 1, output="tensorflow")


def test_torch_cpu_tensors(rng):
    torch = pytest.importorskip("torch")
    X = rng.normal(size=(400, 16)).astype(np.float32)
    ref = voisin.knn(X, X[:10], 5, device="cpu")
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.uint8):
        t = torch.from_numpy(X * 10 + 40).to(dtype)
        want = voisin.knn(t.float().numpy() if dtype == torch.bfloat16 else t.numpy(),
                          t[:10].float().numpy(), 5, device="cpu")
        d, i, s = voisin.knn(t, t[:10].float().numpy(), 5, device="cpu", output="input",
                             stats=True)
        assert isinstance(d, torch.Tensor) and isinstance(i, torch.Tensor)
        np.testing.assert_array_equal(i.numpy(), want[1])
        assert s["host_copy_bytes"] == 0
    d, i = voisin.knn(torch.from_numpy(X), X[:10], 5, device="cpu", output="torch")
    np.testing.assert_array_equal(i.numpy(), ref[1])


@pytest.mark.gpu
def test_cuda_tensors_give_the_numpy_answers(rng):
    X = rng.normal(size=(5000, 64)).astype(np.float32)
    Q = rng.normal(size=(100, 64)).astype(np.float32)
    ref = voisin.knn(X, Q, 10, device="cuda")
    for name in ("torch", "cupy"):
        lib = pytest.importorskip(name)
        if name == "torch":
            base, queries = lib.from_numpy(X).cuda(), lib.from_numpy(Q).cuda()
        else:
            base, queries = lib.asarray(X), lib.asarray(Q)
        d, i, s = voisin.knn(base, queries, 10, device="cuda", output="input", stats=True)
        assert type(d).__module__.split(".")[0] == name
        got = i.cpu().numpy() if name == "torch" else i.get()
        np.testing.assert_array_equal(got, ref[1])
        # until the CUDA engine takes device rows (docs/design/python-dlpack.md), the base
        # and the queries come to the host through their framework, and are counted
        assert s["device_to_host_bytes"] == X.nbytes + Q.nbytes
