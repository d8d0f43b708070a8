"""Memory peers can map: cchan.empty() (cchan_mem_alloc, handed to torch through DLPack) and
cchan.register() (memory the framework allocated), with every rank's pointer for Triton or custom
kernels."""

import ctypes

from . import _lib
from ._lib import check
from ._torch import ClosedError, check_tensor, tensor_from_pointer, torch, typed_view


class SymmetricMemory:
    """One rank's registration of a buffer and its peers' buffers mapped here (collective: every
    rank makes one, in the same order). `ptrs[r]` is rank r's buffer as this rank addresses it."""

    def __init__(self, comm, mem, owned):
        self.comm = comm
        self._mem = mem
        self._owned = owned  # cchan_mem_alloc memory (lives while tensors view it)
        self._peers = None
        self.nbytes = _lib.core().cchan_mem_size(mem)
        self.ptr = _lib.core().cchan_mem_ptr(mem) or 0
        n = comm.size
        peers = (ctypes.c_void_p * n)()
        try:
            check(_lib.core().cchan_mem_exchange(comm._ptr, mem, peers), "cchan_mem_exchange")
        except BaseException:
            _lib.core().cchan_mem_destroy(mem)
            self._mem = None
            raise
        self._peers = [peers[r] for r in range(n)]
        lib = _lib.core()
        self.ptrs = [self.ptr if r == comm.rank else (lib.cchan_mem_ptr(self._peers[r]) or 0)
                     for r in range(n)]
        if owned:
            comm._mem_acquired()

    def release(self):
        if self._mem is None:
            return
        lib = _lib.core()
        for r, p in enumerate(self._peers or []):
            if p and r != self.comm.rank:
                lib.cchan_mem_destroy(p)
        lib.cchan_mem_destroy(self._mem)
        self._mem = None
        if self._owned:
            self.comm._mem_released()

    def __del__(self):
        try:
            self.release()
        except Exception:  # noqa: BLE001
            pass


# Symmetric allocations by the address of their first byte (the tensors from cchan.empty()).
_by_ptr = {}


def _sym_of(t, name):
    check_tensor(t, name, contiguous=False)
    base = t.data_ptr()
    for start, ref in list(_by_ptr.items()):
        sym = ref()
        if sym is None:
            _by_ptr.pop(start, None)
            continue
        if sym.ptr <= base < sym.ptr + max(sym.nbytes, 1):
            return sym
    raise ValueError(f"{name}: expected a tensor from cchan.empty() or cchan.register(), got one "
                     f"at 0x{base:x} that cchan did not allocate or register")


def empty(shape, dtype=torch.float32, comm=None):
    """Collective: a tensor of `shape` and `dtype` on cchan memory of comm's device (the host
    backend: shared memory; CUDA: cuMem), which every peer maps; cchan.peer_pointers(t) gives the
    peers' addresses. Zero-filled. The memory lives while any tensor views it."""
    from .comm import Comm

    if not isinstance(comm, Comm):
        raise TypeError(f"comm: expected a cchan.Comm, got {type(comm).__name__}")
    comm.check_open()
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"shape: expected non-negative sizes, got {shape}")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype: expected a torch.dtype, got {dtype!r}")
    n = 1
    for s in shape:
        n *= s
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    mem = ctypes.c_void_p()
    check(_lib.core().cchan_mem_alloc(comm._ptr, max(nbytes, 16), 0, ctypes.byref(mem)),
          "cchan_mem_alloc")
    sym = SymmetricMemory(comm, mem, owned=True)
    _by_ptr[sym.ptr] = _weak(sym)
    raw = tensor_from_pointer(sym.ptr, max(nbytes, 16), comm.device, sym)
    return typed_view(raw, shape, dtype)


class Registration:
    """cchan.register(tensor, comm): the tensor's memory registered with cchan and mapped by every
    peer (collective). `peer_pointers()` gives the peers' addresses; close() (or the communicator's)
    releases the mappings; the tensor itself stays the framework's."""

    def __init__(self, tensor, comm):
        self.tensor = tensor
        mem = ctypes.c_void_p()
        nbytes = tensor.untyped_storage().nbytes() if hasattr(tensor, "untyped_storage") else \
            tensor.storage().nbytes()
        self.offset = tensor.data_ptr() - _storage_ptr(tensor)
        base = _storage_ptr(tensor)
        check(_lib.core().cchan_mem_register(comm._ptr, base, max(nbytes, 1), 0, ctypes.byref(mem)),
              "cchan_mem_register")
        self.sym = SymmetricMemory(comm, mem, owned=False)
        _by_ptr[self.sym.ptr] = _weak(self.sym)
        comm._adopt(self)

    def peer_pointers(self):
        return peer_pointers(self.tensor)

    def close(self):
        if self.sym is not None:
            _by_ptr.pop(self.sym.ptr, None)
            self.sym.release()
            self.sym = None


def _storage_ptr(t):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().data_ptr()
    return t.storage().data_ptr()


def _weak(obj):
    import weakref

    return weakref.ref(obj)


def register(tensor, comm):
    """Collective: registers the storage of a tensor the framework allocated so every peer maps it
    (CUDA: cudaMalloc or cuMem memory; on the host backend only cchan memory can be shared, so
    use cchan.empty() there). Returns a Registration; keep it while peers use the memory."""
    from .comm import Comm

    if not isinstance(comm, Comm):
        raise TypeError(f"comm: expected a cchan.Comm, got {type(comm).__name__}")
    comm.check_open()
    check_tensor(tensor, "tensor", device=comm.device, contiguous=False)
    return Registration(tensor, comm)


def peer_pointers(t):
    """Every rank's address of the element t[0...] (an int64 tensor of comm.size on t's device), for
    Triton or custom kernels: rank r's copy of `t` starts at ptrs[r]."""
    sym = _sym_of(t, "t")
    if sym._mem is None or sym.comm.closed:
        raise ClosedError("t: its registration or communicator is closed")
    off = t.data_ptr() - sym.ptr
    return torch.tensor([p + off for p in sym.ptrs], dtype=torch.int64, device=t.device)


def peer_tensor(t, rank):
    """Rank `rank`'s copy of t (a tensor from cchan.empty()), mapped here: loads and stores go to
    the peer's memory. Valid while t's allocation lives."""
    sym = _sym_of(t, "t")
    if not isinstance(rank, int) or not 0 <= rank < sym.comm.size:
        raise ValueError(f"rank: expected an int in [0, {sym.comm.size}), got {rank!r}")
    if sym._mem is None:
        raise ClosedError("t: its registration is closed")
    if not t.is_contiguous():
        raise ValueError(f"t: expected a contiguous tensor, got strides {tuple(t.stride())}")
    off = t.data_ptr() - sym.ptr
    nbytes = t.numel() * t.element_size()
    raw = tensor_from_pointer(sym.ptrs[rank] + off, max(nbytes, 1), t.device, sym)
    return typed_view(raw, tuple(t.shape), t.dtype)
