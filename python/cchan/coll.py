"""Collectives on tensors over cchan_coll: all_reduce, all_gather, reduce_scatter (in and out of
place, on the current stream, capturable in a CUDA graph), and CustomAllreduce, shaped like vLLM's
custom all-reduce."""

import contextlib
import ctypes
import os
import sys

from . import _lib
from ._lib import CchanError, check
from ._torch import ClosedError, check_out_overlap, check_tensor, stream_of, torch

_DTYPES = {torch.float32: _lib.COLL_F32, torch.float16: _lib.COLL_F16,
           torch.bfloat16: _lib.COLL_BF16}
_DTYPE_NAMES = {"f32": _lib.COLL_F32, "float32": _lib.COLL_F32, "f16": _lib.COLL_F16,
                "float16": _lib.COLL_F16, "bf16": _lib.COLL_BF16, "bfloat16": _lib.COLL_BF16}
_OP_NAMES = {v: k for k, v in _lib.COLL_OPS.items()}


def _coll_dtype(dtype):
    if dtype in _DTYPES:
        return _DTYPES[dtype]
    if isinstance(dtype, str) and dtype in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtype]
    raise TypeError(f"dtype: expected torch.float32, float16, bfloat16 or one of "
                    f"{sorted(_DTYPE_NAMES)}, got {dtype!r}")


def _coll_op(op):
    if op not in _lib.COLL_OPS:
        raise ValueError(f"op: expected one of {list(_lib.COLL_OPS)}, got {op!r}")
    return _lib.COLL_OPS[op]


def _choice(ch):
    plan = ch.plan.decode() if ch.plan else None
    return {"algo": "plan" if plan else _lib.coll().cchan_coll_algo_name(ch.algo).decode(),
            "plan": plan, "from_table": bool(ch.from_table), "why": ch.why.decode()}


def _coll_error():
    return _lib.coll().cchan_coll_last_error()


class Collectives:
    """The cchan_coll object of a communicator (made collectively by Comm's first collective call,
    or explicitly with scratch_bytes / max_blocks)."""

    def __init__(self, comm, scratch_bytes=0, max_blocks=0):
        comm.check_open()
        self.comm = comm
        lib = _lib.coll()
        cfg = _lib.coll_config(scratch_bytes, max_blocks)
        out = ctypes.c_void_p()
        check(lib.cchan_coll_create(comm._ptr, ctypes.byref(cfg), ctypes.byref(out)),
              "cchan_coll_create", _coll_error)
        self._ptr = out
        self._registered = {}
        comm._adopt(self)

    def close(self):
        if self._ptr is not None:
            p, self._ptr = self._ptr, None
            check(_lib.coll().cchan_coll_destroy(p), "cchan_coll_destroy", _coll_error)

    def _open(self):
        if self._ptr is None or self.comm.closed:
            raise ClosedError("comm: the communicator (or its collectives) is closed "
                              "(expected an open cchan.Comm)")
        return self._ptr

    def _check_in(self, t, name):
        return check_tensor(t, name, dtypes=tuple(_DTYPES), device=self.comm.device)

    def _agree(self, op, t, out_numel):
        if self.comm.check_args:
            names = {v: k for k, v in _DTYPES.items()}
            self.comm.agree("t", op, (t.numel(), _DTYPES[t.dtype], out_numel),
                            lambda v: f"{v[0]} elements of {names[v[1]]} (output {v[2]})")

    def _check_out(self, out, t, shape):
        check_tensor(out, "out", dtypes=(t.dtype,), device=self.comm.device)
        if out.numel() != _numel(shape):
            raise ValueError(f"out: expected {_numel(shape)} elements (shape {list(shape)}), got "
                             f"shape {list(out.shape)}")
        return out

    def register(self, t):
        """Collective: registers t's memory for zero-copy use by later calls (every rank its own
        tensor, in the same order); deregister(t) or close() undoes it."""
        self._check_in(t, "t")
        ptr = self._open()
        check(_lib.coll().cchan_coll_register(ptr, t.data_ptr(), t.numel() * t.element_size()),
              "cchan_coll_register", _coll_error)
        self._registered[t.data_ptr()] = t

    def deregister(self, t):
        ptr = self._open()
        check(_lib.coll().cchan_coll_deregister(ptr, t.data_ptr()), "cchan_coll_deregister",
              _coll_error)
        self._registered.pop(t.data_ptr(), None)

    # ------------------------------------------------------------ selection (docs/collectives.md)

    def load_plans(self, folder_or_files):
        """Collective: loads execution plans (a folder's <name>.n<size>.json, a plan file, or a
        list of either) into the selector's registry; returns how many plans are loaded. Only
        plans the selector can pick get an executor (docs/executor.md)."""
        paths = ([folder_or_files] if isinstance(folder_or_files, (str, os.PathLike))
                 else list(folder_or_files))
        n = 0
        for p in paths:
            ptr = self._open()
            n = check(_lib.coll().cchan_coll_load_plans(ptr, os.fsencode(p)),
                      "cchan_coll_load_plans", _coll_error)
        return n

    def load_tuning(self, path):
        """Collective: the tuning table the selector ranks algorithms by (None: the default
        rule); returns its number of rows."""
        ptr = self._open()
        return check(_lib.coll().cchan_coll_load_tuning(ptr, None if path is None
                                                        else os.fsencode(path)),
                     "cchan_coll_load_tuning", _coll_error)

    def choose(self, op, nbytes, dtype, inplace=False, root=0):
        """What an automatic call runs: {'algo', 'plan', 'from_table', 'why'} for op
        ('allreduce', ..., 'broadcast') on nbytes (AllReduce's buffer, AllGather's output,
        ReduceScatter's input, AllToAll's send, Broadcast's buffer) of dtype."""
        ptr = self._open()
        ch = _lib.CollChoice()
        check(_lib.coll().cchan_coll_choose(ptr, _coll_op(op), _coll_dtype(dtype), int(nbytes),
                                            int(bool(inplace)), int(root), None, None,
                                            ctypes.byref(ch)),
              "cchan_coll_choose", _coll_error)
        return _choice(ch)

    def last_choice(self):
        """What the last automatic call ran and why (as choose())."""
        ptr = self._open()
        ch = _lib.CollChoice()
        check(_lib.coll().cchan_coll_last_choice(ptr, ctypes.byref(ch)), "cchan_coll_last_choice",
              _coll_error)
        return _choice(ch)

    def algos(self):
        """The selector's registry: native algorithms and loaded plans, with what each applies
        to and whether it can be selected ('ready')."""
        ptr = self._open()
        lib = _lib.coll()
        n = check(lib.cchan_coll_algos(ptr, None, 0), "cchan_coll_algos", _coll_error)
        arr = (_lib.CollAlgoInfo * max(n, 1))()
        check(lib.cchan_coll_algos(ptr, arr, n), "cchan_coll_algos", _coll_error)
        return [{"name": a.name.decode(), "plan": a.algo == _lib.COLL_PLAN,
                 "op": _OP_NAMES.get(a.op, str(a.op)), "root": a.root, "inplace": a.inplace,
                 "min_bytes": a.min_bytes, "max_bytes": a.max_bytes or None,
                 "granularity": a.granularity, "ready": bool(a.ready)} for a in arr[:n]]

    def all_reduce(self, t, out=None):
        self._check_in(t, "t")
        ptr = self._open()
        if out is None:
            out = torch.empty_like(t, memory_format=torch.contiguous_format)
        else:
            self._check_out(out, t, t.shape)
            check_out_overlap(out, t, t.data_ptr(), "out=t (in place)")
        self._agree("all_reduce", t, out.numel())
        check(_lib.coll().cchan_coll_allreduce(ptr, t.data_ptr(), out.data_ptr(), t.numel(),
                                               _DTYPES[t.dtype], _lib.COLL_AUTO,
                                               stream_of(t.device)),
              "cchan_coll_allreduce", _coll_error)
        return out

    def all_gather(self, t, out=None):
        self._check_in(t, "t")
        ptr = self._open()
        n = self.comm.size
        shape = (n * t.shape[0],) + tuple(t.shape[1:]) if t.dim() else (n,)
        if out is None:
            out = torch.empty(shape, dtype=t.dtype, device=t.device)
        else:
            self._check_out(out, t, shape)
            r = self.comm.rank
            check_out_overlap(out, t, t.data_ptr() - r * t.numel() * t.element_size(),
                              f"t = out[{r} * n:{r + 1} * n] (in place, n = t.numel())")
        self._agree("all_gather", t, out.numel())
        check(_lib.coll().cchan_coll_allgather(ptr, t.data_ptr(), out.data_ptr(), t.numel(),
                                               _DTYPES[t.dtype], _lib.COLL_AUTO,
                                               stream_of(t.device)),
              "cchan_coll_allgather", _coll_error)
        return out

    def reduce_scatter(self, t, out=None):
        self._check_in(t, "t")
        ptr = self._open()
        n = self.comm.size
        if t.dim() == 0 or t.shape[0] % n:
            raise ValueError(f"t: expected dim 0 a multiple of the {n} ranks, got shape "
                             f"{list(t.shape)}")
        shape = (t.shape[0] // n,) + tuple(t.shape[1:])
        if out is None:
            out = torch.empty(shape, dtype=t.dtype, device=t.device)
        else:
            self._check_out(out, t, shape)
            r = self.comm.rank
            check_out_overlap(out, t, t.data_ptr() + r * out.numel() * out.element_size(),
                              f"out = t[{r} * n:{r + 1} * n] (in place, n = out.numel())")
        self._agree("reduce_scatter", t, out.numel())
        check(_lib.coll().cchan_coll_reducescatter(ptr, t.data_ptr(), out.data_ptr(),
                                                   _numel(shape), _DTYPES[t.dtype],
                                                   _lib.COLL_AUTO, stream_of(t.device)),
              "cchan_coll_reducescatter", _coll_error)
        return out

    def algorithm(self, op, nbytes):
        """The selector's algorithm name for op ('all_reduce', 'all_gather', 'reduce_scatter')
        at nbytes (the full buffer)."""
        ops = {"all_reduce": _lib.COLL_ALLREDUCE, "all_gather": _lib.COLL_ALLGATHER,
               "reduce_scatter": _lib.COLL_REDUCESCATTER}
        if op not in ops:
            raise ValueError(f"op: expected one of {sorted(ops)}, got {op!r}")
        lib = _lib.coll()
        return lib.cchan_coll_algo_name(lib.cchan_coll_select(self._open(), ops[op],
                                                              nbytes)).decode()


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _comm_coll(comm):
    comm.check_open()
    c = getattr(comm, "_coll_obj", None)
    if c is None or c._ptr is None:
        c = Collectives(comm)
        comm._coll_obj = c
    return c


# cchan.empty() tensors behind create_shared_buffer()'s pointers, by this rank's pointer: the
# pointers alone do not keep the memory alive.
_SHARED_BUFFERS = {}


class CustomAllreduce:
    """vLLM's CustomAllreduce (vllm/distributed/device_communicators/custom_all_reduce.py) over
    cchan_coll: the same constructor, attributes, refusal rules and methods.

        ar = cchan.CustomAllreduce(group, device=None, max_size=8192 * 1024,
                                   symm_mem_enabled=False)
        if ar.should_custom_ar(x):
            y = ar.custom_all_reduce(x)      # or ar.all_reduce(x, out=y, registered=False)
        with ar.capture():                   # around CUDA-graph capture; on exit
            ...                              # register_graph_buffers() (collective)
        ar.close()                           # collective

    group: a torch.distributed process group (gloo or nccl; a cchan communicator is made from it
    on `device`, None: torch's current device) or a cchan.Comm. `disabled` is True, with
    `disabled_reason`, where vLLM's rules refuse the group (one rank; a size other than 2, 4, 6
    or 8; ranks on several hosts) or cchan cannot serve it (the libraries do not load)."""

    _SUPPORTED_WORLD_SIZES = [2, 4, 6, 8]

    def __init__(self, group=None, device=None, max_size=8192 * 1024, symm_mem_enabled=False):
        from .comm import Comm

        self._IS_CAPTURING = False
        self.disabled = True
        self.disabled_reason = ""
        self._closed = False
        self._ptr = 0
        self._coll = None
        self._own_comm = False
        self._graph_calls = []
        self.comm = None
        self.group = group
        self.max_size = int(max_size)
        # vLLM lowers max_size per GPU generation where its symmetric-memory all-reduce takes the
        # larger sizes; cchan's memory is symmetric already and its selector picks per size.
        self.symm_mem_enabled = bool(symm_mem_enabled)
        self.fully_connected = False
        if isinstance(device, int):
            device = torch.device("cuda", device)
        elif device is not None:
            device = torch.device(device)
        if isinstance(group, Comm):
            group.check_open("group")
            self.rank, self.world_size = group.rank, group.size
        else:
            import torch.distributed as dist

            if not dist.is_available() or not dist.is_initialized():
                raise ValueError("group: torch.distributed is not initialized (call "
                                 "torch.distributed.init_process_group first, or pass a "
                                 "cchan.Comm)")
            self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)
        self.device = device
        # vLLM's refusals, decided from the group's size alone, so every rank takes the same
        # branch before any collective.
        if self.world_size == 1:
            self.disabled_reason = "one rank: nothing to reduce"
            return
        if self.world_size not in self._SUPPORTED_WORLD_SIZES:
            self.disabled_reason = (f"world size {self.world_size}: vLLM's custom all-reduce "
                                    f"serves {self._SUPPORTED_WORLD_SIZES}")
            return
        try:
            if isinstance(group, Comm):
                self.comm = group
            else:
                platform = "auto" if device is None else (
                    "host" if device.type == "cpu" else device.type)
                self.comm = Comm.from_process_group(group, platform=platform, device=device)
                self._own_comm = True
        except (ImportError, CchanError) as e:
            self.disabled_reason = str(e)
            return
        if device is not None and device != self.comm.device:
            raise ValueError(f"device: expected the communicator's device {self.comm.device}, got "
                             f"{device}")
        self.device = self.comm.device
        if self.comm.local_size != self.comm.size:
            self.disabled_reason = (f"the group's {self.comm.size} ranks span hosts "
                                    f"({self.comm.local_size} on this one)")
            return
        # cchan maps every peer's memory at setup (cchan_coll_create fails otherwise), so every
        # rank reaches every other directly; NVLink and PCIe are not told apart.
        self._coll = Collectives(self.comm)
        self._ptr = self._coll._ptr.value
        self.fully_connected = True
        self.disabled = False

    def finalize_p2p(self):
        """vLLM defers its peer-access check to this collective call; cchan checked peer access
        when it set up (the constructor), so nothing is left to do."""

    def _usable(self):
        if self._closed:
            raise ClosedError("CustomAllreduce: closed (expected an open CustomAllreduce)")
        if self.disabled:
            raise RuntimeError(f"CustomAllreduce is disabled: {self.disabled_reason}")

    def should_custom_ar(self, inp):
        """vLLM's rule: a multiple of 16 bytes, below max_size (strictly), at 2 ranks or over
        fully connected ones; and what cchan's kernels take: a contiguous f32/f16/bf16 tensor on
        the communicator's device."""
        if self.disabled or not isinstance(inp, torch.Tensor):
            return False
        nbytes = inp.numel() * inp.element_size()
        if nbytes % 16 or inp.dtype not in _DTYPES or inp.device != self.comm.device:
            return False
        if not inp.is_contiguous():
            return False
        if self.world_size == 2 or self.fully_connected:
            return nbytes < self.max_size
        return False

    def all_reduce(self, inp, *, out=None, registered=False):
        """out = sum over ranks of inp (out=None: a new tensor). registered is accepted for
        vLLM's calls: cchan runs zero-copy where inp lies in memory registered with
        register_buffer() and through its own scratch otherwise, whichever is passed."""
        self._usable()
        nbytes = inp.numel() * inp.element_size() if isinstance(inp, torch.Tensor) else 0
        if nbytes > self.max_size:
            raise ValueError(f"inp: expected at most max_size = {self.max_size} bytes, got "
                             f"{nbytes}")
        out = self._coll.all_reduce(inp, out=out)
        if self._IS_CAPTURING and inp.is_cuda and torch.cuda.is_current_stream_capturing():
            self._graph_calls.append((inp.numel(), _DTYPES[inp.dtype]))
        return out

    def custom_all_reduce(self, input):  # noqa: A002 - vLLM's parameter name
        """vLLM's entry point: all_reduce(input) where should_custom_ar(input), else None (the
        caller falls back to another all-reduce). Inside capture() but outside a capturing
        stream (vLLM's warm-up runs) vLLM returns an unreduced tensor of the right shape; cchan
        reduces, which allocates the same and gives the right values."""
        if self._closed or self.disabled or not self.should_custom_ar(input):
            return None
        return self.all_reduce(input, registered=self._IS_CAPTURING)

    def register_buffer(self, t):
        """Collective: t's memory is used in place (zero-copy) by later calls on it."""
        self._usable()
        self._coll.register(t)

    @contextlib.contextmanager
    def capture(self):
        """Around CUDA-graph capture; on exit register_graph_buffers() (collective, as vLLM's).
        cchan's calls only launch kernels on the current stream (the setup happened at
        construction), so captured calls replay as they ran."""
        if not self.disabled:
            self._usable()
            self._coll._open()
        self._graph_calls = []
        try:
            self._IS_CAPTURING = True
            yield
        finally:
            self._IS_CAPTURING = False
            if not self.disabled:
                self.register_graph_buffers()

    def register_graph_buffers(self):
        """Collective. vLLM exchanges the addresses its captured kernels read, which they find
        through a table filled here; cchan's captured kernels reach the peers through memory set
        up before capture and need nothing. What is left is the check that gives vLLM's exchange
        its meaning: every rank captured the same all-reduces (count, sizes, dtypes), else each
        raises ValueError naming them, before a replay would wait for data that never comes.
        Returns how many all-reduces were captured since capture() began."""
        self._usable()
        calls, self._graph_calls = self._graph_calls, []
        digest, total = 0, 0
        for numel, dt in calls:
            digest = (digest * 1000003 + numel * 8 + dt) % (1 << 61)
            total += numel
        self.comm.agree("capture", "the all-reduces captured in a CUDA graph",
                        (len(calls), total, digest),
                        lambda v: f"{v[0]} calls, {v[1]} elements in all")
        return len(calls)

    @staticmethod
    def create_shared_buffer(size_in_bytes, group=None, uncached=False):
        """Collective over group (a cchan.Comm, or a process group a communicator is made
        from): size_in_bytes of zero-filled cchan memory on every rank; returns every rank's
        address of it (element r: rank r's, mapped here). free_shared_buffer() releases it.
        uncached is accepted: cchan's memory channels order their own accesses."""
        from .comm import Comm
        from .memory import empty, peer_pointers

        comm = group if isinstance(group, Comm) else Comm.from_process_group(group)
        n = int(size_in_bytes)
        if n <= 0:
            raise ValueError(f"size_in_bytes: expected a positive int, got {size_in_bytes!r}")
        t = empty((n,), torch.uint8, comm)
        ptrs = [int(p) for p in peer_pointers(t).cpu().tolist()]
        _SHARED_BUFFERS[ptrs[comm.rank]] = t
        return ptrs

    @staticmethod
    def free_shared_buffer(pointers, group=None, rank=None):
        """Releases a create_shared_buffer() allocation (its memory goes once no peer maps it)."""
        if rank is None:
            from .comm import Comm

            if isinstance(group, Comm):
                rank = group.rank
            else:
                import torch.distributed as dist

                rank = dist.get_rank(group)
        _SHARED_BUFFERS.pop(pointers[rank], None)

    def close(self):
        """Collective (cchan_coll_destroy, and the communicator made from a process group), unlike
        vLLM's, which frees this rank's buffers alone: every rank calls it. Idempotent; afterwards
        the object is disabled (custom_all_reduce returns None, all_reduce raises ClosedError)."""
        if self._closed:
            return
        self._closed = True
        self._ptr = 0
        try:
            if self._coll is not None:
                self._coll.close()
                self._coll = None
        finally:
            if self._own_comm and self.comm is not None:
                self.comm.close()
            self.disabled = True
            self.disabled_reason = "closed"

    def __del__(self):
        # vLLM's __del__ calls close(). Here close() meets the peers (cchan_coll_destroy is
        # collective), which holds where every rank drops its object at the same point of the
        # same program, as vLLM's workers do; a peer that never does makes the wait end at the
        # communicator's deadline, with the error swallowed below. At interpreter shutdown the
        # peers may have exited and this module's globals may be None already: nothing is called
        # then (the process's exit releases the memory), so exit never waits on a peer.
        try:
            if getattr(self, "_closed", True) or sys is None or sys.is_finalizing() \
                    or _lib is None:
                return
            self.close()
        except Exception:  # noqa: BLE001 - a destructor must not raise
            pass
