"""Collectives on tensors over cchan_coll: all_reduce, all_gather, reduce_scatter (in and out of
place, on the current stream, capturable in a CUDA graph), and CustomAllreduce, shaped like vLLM's
custom all-reduce."""

import contextlib
import ctypes
import os

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


class CustomAllreduce:
    """vLLM's custom all-reduce interface over cchan_coll:

        ar = cchan.CustomAllreduce(group_or_comm, device=None, max_size=8 << 20)
        if not ar.disabled and ar.should_custom_ar(x):
            y = ar.all_reduce(x)              # or ar.all_reduce(x, out=y); out=x: in place
        with ar.capture():                    # around CUDA-graph capture
            ...
        ar.close()

    group: a cchan.Comm, or a torch.distributed process group (a communicator is made from it).
    `disabled` is True, with `disabled_reason` saying why, where cchan cannot serve the group
    (the libraries do not load, one rank only, a device other than the communicator's)."""

    def __init__(self, group=None, device=None, max_size=8 << 20):
        from .comm import Comm

        self.disabled = True
        self.disabled_reason = ""
        self._closed = False
        self.max_size = int(max_size)
        self._coll = None
        self._own_comm = False
        try:
            if isinstance(group, Comm):
                self.comm = group
            else:
                self.comm = Comm.from_process_group(group)
                self._own_comm = True
        except (ImportError, CchanError) as e:
            self.comm = None
            self.disabled_reason = str(e)
            return
        if device is not None and torch.device(device) != self.comm.device:
            raise ValueError(f"device: expected the communicator's device {self.comm.device}, got "
                             f"{torch.device(device)}")
        if self.comm.size == 1:
            self.disabled_reason = "one rank: nothing to reduce"
            return
        self._coll = Collectives(self.comm)
        self.disabled = False

    def should_custom_ar(self, inp):
        """Whether all_reduce(inp) runs here: a contiguous f32/f16/bf16 tensor on the
        communicator's device of at most max_size bytes."""
        return (not self.disabled and isinstance(inp, torch.Tensor) and inp.dtype in _DTYPES
                and inp.device == self.comm.device and inp.is_contiguous()
                and inp.numel() * inp.element_size() <= self.max_size)

    def _usable(self):
        if self._closed:
            raise ClosedError("CustomAllreduce: closed (expected an open CustomAllreduce)")
        if self.disabled:
            raise RuntimeError(f"CustomAllreduce is disabled: {self.disabled_reason}")

    def all_reduce(self, inp, *, out=None, registered=False):
        self._usable()
        nbytes = inp.numel() * inp.element_size() if isinstance(inp, torch.Tensor) else 0
        if nbytes > self.max_size:
            raise ValueError(f"inp: expected at most max_size = {self.max_size} bytes, got "
                             f"{nbytes}")
        return self._coll.all_reduce(inp, out=out)

    def custom_all_reduce(self, inp):
        """vLLM's entry point: all_reduce(inp) where should_custom_ar(inp), else None (the caller
        falls back to another all-reduce)."""
        if self._closed or self.disabled or not self.should_custom_ar(inp):
            return None
        return self._coll.all_reduce(inp)

    def register_buffer(self, t):
        """Collective: t's memory is used in place (zero-copy) by later calls on it."""
        self._usable()
        self._coll.register(t)

    @contextlib.contextmanager
    def capture(self):
        """Around CUDA-graph capture. cchan's calls only launch kernels on the current stream (the
        setup happened at construction), so captured calls replay as they ran; the context exists
        for vLLM's interface and checks the object is usable before capture starts."""
        self._usable()
        self._coll._open()
        yield

    def close(self):
        self._closed = True
        if self._coll is not None:
            self._coll.close()
            self._coll = None
        if self._own_comm and self.comm is not None:
            self.comm.close()
        self.disabled = True
        self.disabled_reason = "closed"
