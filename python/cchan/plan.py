"""cchan.Plan: runs an execution plan (compiled by cchan.dsl) over cchan_exec on tensors.

    from cchan.dsl.algorithms import allreduce_2pa
    doc = allreduce_2pa.program(comm.size).compile()
    plan = cchan.Plan(comm, doc)
    plan.run(send, recv)            # on the current stream; capturable after a first run
"""

import ctypes
import json
import os

from . import _lib
from ._lib import check
from ._torch import ClosedError, check_tensor, stream_of, torch

_DTYPES = {torch.float32: _lib.EXEC_F32, torch.float16: _lib.EXEC_F16,
           torch.bfloat16: _lib.EXEC_BF16}


def available():
    """Whether libcchan_exec.so loads here (else unavailable_reason() says why)."""
    return unavailable_reason() is None


def unavailable_reason():
    try:
        _lib.exec_()
        return None
    except ImportError as e:
        return str(e)


def _exec_error():
    return _lib.exec_().cchan_exec_last_error()


def _plan_json(plan):
    if hasattr(plan, "compile") and callable(plan.compile):  # a cchan.dsl Program
        plan = plan.compile()
    if isinstance(plan, dict):
        return json.dumps(plan).encode()
    if isinstance(plan, (bytes, bytearray)):
        return bytes(plan)
    if isinstance(plan, (str, os.PathLike)):
        s = os.fspath(plan)
        if s.lstrip().startswith("{"):
            return s.encode()
        if not os.path.isfile(s):
            raise ValueError(f"plan: expected a plan document (dict), a cchan.dsl Program, JSON "
                             f"text or a plan file, got the path {s!r}, which does not exist")
        with open(s, "rb") as f:
            return f.read()
    raise TypeError(f"plan: expected a plan document (dict), a cchan.dsl Program, JSON text or a "
                    f"plan file path, got {type(plan).__name__}")


class Plan:
    """An execution plan loaded, checked and set up on a communicator (collective). run(send,
    recv) runs it on tensors: send is one rank's input (f32/f16/bf16, contiguous, on comm's
    device), recv the plan's output (in_bytes / in_chunks * out_chunks bytes); in-place plans
    take recv=send (AllReduce, Broadcast) or send = recv[rank * n:(rank + 1) * n] (AllGather)."""

    def __init__(self, comm, plan):
        comm.check_open()
        self.comm = comm
        self._plan = None
        self._ptr = None
        lib = _lib.exec_()
        text = _plan_json(plan)
        p = ctypes.c_void_p()
        check(lib.cchan_exec_plan_load_string(text, len(text), ctypes.byref(p)),
              "cchan_exec_plan_load_string", _exec_error)
        self._plan = p
        info = _lib.ExecPlanInfo()
        check(lib.cchan_exec_plan_info(p, ctypes.byref(info)), "cchan_exec_plan_info", _exec_error)
        self.info = {f: getattr(info, f) for f, _ in _lib.ExecPlanInfo._fields_}
        self.info["name"] = (info.name or b"").decode()
        self.name = self.info["name"]
        self.collective = _lib.EXEC_COLLECTIVES.get(info.collective, str(info.collective))
        if info.nranks != comm.size:
            lib.cchan_exec_plan_free(p)
            self._plan = None
            raise ValueError(f"plan: expected a plan for the communicator's {comm.size} ranks, got "
                             f"one for {info.nranks} ({self.name})")
        e = ctypes.c_void_p()
        try:
            check(lib.cchan_exec_create(comm._ptr, p, ctypes.byref(e)), "cchan_exec_create",
                  _exec_error)
        except BaseException:
            lib.cchan_exec_plan_free(p)
            self._plan = None
            raise
        self._ptr = e
        self._registered = {}
        comm._adopt(self)

    def _open(self):
        if self._ptr is None or self.comm.closed:
            raise ClosedError("plan: this cchan.Plan (or its communicator) is closed; expected an "
                              "open Plan")
        return self._ptr

    def out_numel(self, send):
        """Elements of the output for the input `send`."""
        return send.numel() // self.info["in_chunks"] * self.info["out_chunks"]

    def fits(self, nbytes):
        return bool(_lib.exec_().cchan_exec_plan_fits(self._plan, nbytes))

    def register(self, t):
        """Collective: registers t's memory for plans that reach peers' inputs or outputs."""
        check_tensor(t, "t", dtypes=tuple(_DTYPES), device=self.comm.device)
        check(_lib.exec_().cchan_exec_register(self._open(), t.data_ptr(),
                                               t.numel() * t.element_size()),
              "cchan_exec_register", _exec_error)
        self._registered[t.data_ptr()] = t

    def run(self, send, recv=None):
        ptr = self._open()
        dev = self.comm.device
        check_tensor(send, "send", dtypes=tuple(_DTYPES), device=dev)
        in_bytes = send.numel() * send.element_size()
        g = self.info["granularity"]
        if g and in_bytes % g:
            raise ValueError(f"send: expected a multiple of the plan's granularity, {g} bytes, got "
                             f"{in_bytes} bytes")
        n_out = self.out_numel(send)
        if recv is None:
            recv = torch.empty(n_out, dtype=send.dtype, device=dev)
        else:
            check_tensor(recv, "recv", dtypes=(send.dtype,), device=dev)
            if recv.numel() != n_out:
                raise ValueError(f"recv: expected {n_out} elements (the plan's output for "
                                 f"{send.numel()} input elements), got {recv.numel()}")
        s0, s1 = send.data_ptr(), send.data_ptr() + in_bytes
        r0, r1 = recv.data_ptr(), recv.data_ptr() + recv.numel() * recv.element_size()
        if s0 < r1 and r0 < s1 and not self.info["inplace"]:
            raise ValueError(f"recv: overlaps send, but plan {self.name!r} is out of place; "
                             f"expected separate send and recv tensors (or an in-place plan)")
        check(_lib.exec_().cchan_exec_run(ptr, send.data_ptr(), recv.data_ptr(), send.numel(),
                                          _DTYPES[send.dtype], _lib.EXEC_SUM, stream_of(dev)),
              "cchan_exec_run", _exec_error)
        return recv

    def close(self):
        lib = None
        if self._ptr is not None:
            lib = _lib.exec_()
            p, self._ptr = self._ptr, None
            check(lib.cchan_exec_destroy(p), "cchan_exec_destroy", _exec_error)
        if self._plan is not None:
            (lib or _lib.exec_()).cchan_exec_plan_free(self._plan)
            self._plan = None
