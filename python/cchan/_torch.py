"""torch helpers shared by the modules that take tensors: the import with a clear message, argument
checks that name the argument and the expected value, streams, and raw-pointer tensors (DLPack)."""

import ctypes

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised on machines without torch
    raise ImportError(
        "cchan's tensor API needs PyTorch (Debian: apt-get install python3-torch; pip: torch); "
        "cchan.dsl works without it"
    ) from e

from ctypes import POINTER, Structure, c_int32, c_int64, c_uint8, c_uint16, c_uint64, c_void_p


class ClosedError(RuntimeError):
    """An object (communicator, buffer, handle) was used after close()."""


# ------------------------------------------------------------------ argument checks


def dtype_name(dt):
    return str(dt).replace("torch.", "")


def check_tensor(t, name, *, dtypes=None, device=None, ndim=None, shape=None, contiguous=True):
    """Raises TypeError/ValueError naming `name` and what was expected."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        want = " or ".join(dtype_name(d) for d in dtypes)
        raise TypeError(f"{name}: expected dtype {want}, got {dtype_name(t.dtype)}")
    if device is not None and t.device != device:
        raise ValueError(
            f"{name}: expected a tensor on {device} (the communicator's device), got {t.device}"
        )
    if ndim is not None and t.dim() != ndim:
        raise ValueError(
            f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)} ({t.dim()} dimensions)"
        )
    if shape is not None:
        got = tuple(t.shape)
        if len(got) != len(shape) or any(w is not None and g != w for g, w in zip(got, shape)):
            want = "[" + ", ".join("*" if w is None else str(w) for w in shape) + "]"
            raise ValueError(f"{name}: expected shape {want}, got {list(got)}")
    if contiguous and not t.is_contiguous():
        raise ValueError(
            f"{name}: expected a contiguous tensor (row-major strides), got strides "
            f"{tuple(t.stride())} for shape {tuple(t.shape)}; pass {name}.contiguous()"
        )
    return t


def check_out_overlap(out, t, in_place_ptr, in_place):
    """Raises ValueError naming `out` where its bytes overlap t's anywhere but at in_place_ptr,
    the one place where the call works in place (None: it has no in-place form), described by
    in_place. The kernels read the input while writing out: a partial overlap reads what they
    already wrote."""
    o0, t0 = out.data_ptr(), t.data_ptr()
    o1, t1 = o0 + out.numel() * out.element_size(), t0 + t.numel() * t.element_size()
    if o0 < t1 and t0 < o1 and o0 != in_place_ptr:
        want = f"memory apart from it, or {in_place}" if in_place else "memory apart from it"
        raise ValueError(f"out: overlaps the input (out at bytes [{o0:#x}, {o1:#x}), input at "
                         f"[{t0:#x}, {t1:#x})); expected {want}")


def stream_of(device):
    """The current stream's handle (cudaStream_t as an int) for a CUDA device, None on the CPU."""
    if device.type != "cuda":
        return None
    return torch.cuda.current_stream(device).cuda_stream or None


# ------------------------------------------------------------------ DLPack


class _DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class _DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", _DLDevice),
        ("ndim", c_int32),
        ("dtype", _DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class _DLManagedTensor(Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", c_void_p),
    ("deleter", _DELETER),
]

# Owners of memory handed to torch, by the address of their DLManagedTensor: released when torch
# calls the deleter (the last tensor viewing the memory is gone).
_owners = {}
_shutting_down = [False]


def _on_delete(managed):
    if _shutting_down[0]:
        return
    try:
        _owners.pop(ctypes.addressof(managed.contents), None)
    except Exception:  # noqa: BLE001 - a deleter must not raise into torch
        pass


_deleter = _DELETER(_on_delete)

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [c_void_p, ctypes.c_char_p, c_void_p]


def _atexit():
    _shutting_down[0] = True


import atexit  # noqa: E402

atexit.register(_atexit)


def tensor_from_pointer(ptr, nbytes, device, owner):
    """A 1-D uint8 tensor over [ptr, ptr + nbytes) on `device`, through DLPack; `owner` is kept
    alive until torch releases the last tensor that views the memory."""
    shape = (c_int64 * 1)(nbytes)
    m = _DLManagedTensor()
    m.dl_tensor.data = ptr
    if device.type == "cuda":
        m.dl_tensor.device = _DLDevice(2, device.index if device.index is not None else 0)
    else:
        m.dl_tensor.device = _DLDevice(1, 0)
    m.dl_tensor.ndim = 1
    m.dl_tensor.dtype = _DLDataType(1, 8, 1)  # kDLUInt, 8 bits
    m.dl_tensor.shape = ctypes.cast(shape, POINTER(c_int64))
    m.dl_tensor.strides = None
    m.dl_tensor.byte_offset = 0
    m.manager_ctx = None
    m.deleter = _deleter
    _owners[ctypes.addressof(m)] = (m, shape, owner)
    capsule = _PyCapsule_New(ctypes.addressof(m), b"dltensor", None)
    return torch.utils.dlpack.from_dlpack(capsule)


def typed_view(raw, shape, dtype):
    """Views a 1-D uint8 tensor as `dtype` with `shape` (row-major)."""
    n = 1
    for s in shape:
        n *= s
    esize = torch.empty((), dtype=dtype).element_size()
    return raw[: n * esize].view(dtype).view(*shape) if n else torch.empty(shape, dtype=dtype,
                                                                           device=raw.device)


def fp8_dtype():
    """torch.float8_e4m3fn where this torch has it, else torch.uint8 (the raw e4m3 bytes)."""
    return getattr(torch, "float8_e4m3fn", torch.uint8)
