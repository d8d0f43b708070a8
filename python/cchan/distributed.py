"""cchan as a torch.distributed backend.

    import cchan.distributed
    cchan.distributed.register_backend()                # once per process, before init
    torch.distributed.init_process_group("cchan", ...)   # torch 1.13: every device
    torch.distributed.init_process_group("cuda:cchan,cpu:gloo", ...)   # torch 2.x

all_reduce (SUM, AVG), all_gather and all_gather_into_tensor, reduce_scatter and
reduce_scatter_tensor (SUM, AVG), all_to_all_single (equal splits) and broadcast (where a loaded
execution plan serves them), and barrier run on cchan for contiguous f32/f16/bf16 tensors on the
communicator's device. Everything else (other dtypes, devices and ops, uneven splits, send/recv,
gather, scatter, reduce, the coalesced and list forms cchan has no path for) goes to a gloo process
group made beside it over the same store. The choice depends only on the call's arguments, so
every rank that passes the same arguments takes the same path.
"""

import datetime
import inspect

from . import _lib
from ._lib import check
from ._torch import torch

BACKEND_NAME = "cchan"
_UID_KEY = "cchan/unique_id"


def _dist():
    import torch.distributed as dist

    return dist


def _work_class():
    dist = _dist()
    # torch 1.13 exposes the subclassable Work as _Work; later versions as Work.
    return getattr(dist, "_Work", None) or dist.Work


_DoneWork = None


def _done(result=None):
    """A completed Work: cchan's calls are ordered on the current stream (CUDA) or done on
    return (the host backend), as NCCL's are for the caller's stream."""
    global _DoneWork
    if _DoneWork is None:
        base = _work_class()

        class DoneWork(base):
            def __init__(self, result):
                super().__init__()
                self._result = result

            def wait(self, timeout=None):
                return True

            def is_completed(self):
                return True

            def is_success(self):
                return True

            def result(self):
                return self._result

        _DoneWork = DoneWork
    return _DoneWork(result)


def _opts(name):
    """torch's options struct `name` (AllreduceOptions, ...): torch.distributed re-exports some
    of them, torch._C._distributed_c10d has them all."""
    from torch._C import _distributed_c10d as c10d

    return getattr(c10d, name)()


def _sum_like(op):
    R = _dist().ReduceOp
    if op == R.SUM:
        return "sum"
    if hasattr(R, "AVG") and op == R.AVG:
        return "avg"
    return None


class ProcessGroupCchan(_dist().ProcessGroup):
    """A torch.distributed process group over a cchan communicator, with a gloo group beside it
    for what cchan has no path for (`fallback`). Made by init_process_group / new_group through
    the creator register_backend() registers."""

    def __init__(self, store, rank, size, timeout, platform="auto"):
        super().__init__(rank, size)
        from .comm import Comm, timeout_to_ms, unique_id

        dist = _dist()
        self._timeout = timeout
        # The group's timeout (init_process_group's or new_group's) is the caller's deadline for
        # every operation of the group: the communicator's device-side and host-side waits end
        # with it, as gloo's do, not at cchan's own defaults (ten minutes, 30 s).
        timeout_ms = timeout_to_ms(timeout)
        if rank == 0:
            uid = unique_id()
            store.set(_UID_KEY, uid.hex())
        else:
            uid = bytes.fromhex(bytes(store.get(_UID_KEY)).decode())
        self.comm = Comm.from_unique_id(uid, rank, size, platform=platform, timeout_ms=timeout_ms)
        self.fallback = dist.ProcessGroupGloo(dist.PrefixStore("cchan-gloo/", store), rank, size,
                                              timeout)
        self.cchan_calls = 0  # collectives cchan ran (the rest went to the fallback)

    # ------------------------------------------------------------ helpers

    def getBackendName(self):  # noqa: N802 - torch's name
        return BACKEND_NAME

    def _get_backend_name(self):
        return BACKEND_NAME

    def name(self):
        return BACKEND_NAME

    def _ok(self, *tensors):
        from .coll import _DTYPES

        t0 = tensors[0]
        for t in tensors:
            if not isinstance(t, torch.Tensor) or t.dtype not in _DTYPES or t.dtype != t0.dtype:
                return False
            if t.device != self.comm.device or not t.is_contiguous() or t.numel() == 0:
                return False
        return not self.comm.closed

    def _ran(self, result=None):
        self.cchan_calls += 1
        return _done(result)

    # ------------------------------------------------------------ collectives

    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else _opts("AllreduceOptions")
        kind = _sum_like(opts.reduceOp)
        if kind and len(tensors) == 1 and self._ok(tensors[0]):
            t = tensors[0]
            self.comm.all_reduce(t, out=t)
            if kind == "avg":
                t.div_(self.size())
            return self._ran(tensors)
        return self.fallback.allreduce(tensors, opts)

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else _opts("AllgatherOptions")
        if (len(input_tensors) == 1 and len(output_tensors) == 1
                and len(output_tensors[0]) == self.size()):
            t, outs = input_tensors[0], output_tensors[0]
            if self._ok(t, *outs) and all(o.shape == t.shape for o in outs):
                flat = self.comm.all_gather(t.reshape(-1))
                for r, o in enumerate(outs):
                    o.copy_(flat[r * t.numel():(r + 1) * t.numel()].view_as(o))
                return self._ran(output_tensors)
        return self.fallback.allgather(output_tensors, input_tensors, opts)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 - torch's names
        opts = opts if opts is not None else _opts("AllgatherOptions")
        if self._ok(output, input) and output.numel() == input.numel() * self.size():
            self.comm.all_gather(input.reshape(-1), out=output.view(-1))
            return self._ran([output])
        return self.fallback._allgather_base(output, input, opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else _opts("ReduceScatterOptions")
        kind = _sum_like(opts.reduceOp)
        if (kind and len(output_tensors) == 1 and len(input_tensors) == 1
                and len(input_tensors[0]) == self.size()):
            o, ins = output_tensors[0], input_tensors[0]
            if self._ok(o, *ins) and all(i.shape == o.shape for i in ins):
                flat = torch.cat([i.reshape(-1) for i in ins])
                self.comm.reduce_scatter(flat, out=o.view(-1))
                if kind == "avg":
                    o.div_(self.size())
                return self._ran(output_tensors)
        return self.fallback.reduce_scatter(output_tensors, input_tensors, opts)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002
        opts = opts if opts is not None else _opts("ReduceScatterOptions")
        kind = _sum_like(opts.reduceOp)
        if kind and self._ok(output, input) and input.numel() == output.numel() * self.size():
            self.comm.reduce_scatter(input.view(-1), out=output.view(-1))
            if kind == "avg":
                output.div_(self.size())
            return self._ran([output])
        return self.fallback._reduce_scatter_base(output, input, opts)

    def _plan_only(self, fn, *a):
        """AllToAll and Broadcast run on loaded execution plans only: True where one ran,
        False where none fits (CCHAN_ERR_UNSUPPORTED, nothing launched; the same on every rank,
        as plans are loaded collectively), so the caller falls back."""
        from .coll import _coll_error

        st = fn(*a)
        if st == _lib.CCHAN_ERR_UNSUPPORTED:
            return False
        check(st, fn.__name__, _coll_error)
        return True

    def _staging(self, nbytes, dtype):
        """Send and recv buffers of nbytes in cchan memory registered with the collectives:
        AllToAll's and Broadcast's plans read and write the peers' buffers, which on the host
        backend only cchan memory can be. Grown collectively (every rank makes the same call)."""
        from .memory import empty

        if getattr(self, "_stage_bytes", 0) < nbytes:
            coll = self.comm._collectives()
            for t in getattr(self, "_stage", ()):
                coll.deregister(t)
            size = max(nbytes, 2 * getattr(self, "_stage_bytes", 0))
            size = (size + 15) // 16 * 16
            self._stage = [empty((size // 4,), torch.float32, self.comm) for _ in range(2)]
            for t in self._stage:
                coll.register(t)
            self._stage_bytes = size
        return [t.view(torch.uint8)[:nbytes].view(dtype) for t in self._stage]

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes,  # noqa: A002
                      opts=None):
        from .coll import _DTYPES
        from ._torch import stream_of

        opts = opts if opts is not None else _opts("AllToAllOptions")
        n = self.size()
        if (not output_split_sizes and not input_split_sizes and self._ok(output, input)
                and output.numel() == input.numel() and input.numel() % n == 0):
            coll = self.comm._collectives()
            send, recv = self._staging(input.numel() * input.element_size(), input.dtype)
            send.copy_(input.view(-1))
            if self._plan_only(_lib.coll().cchan_coll_alltoall, coll._open(), send.data_ptr(),
                               recv.data_ptr(), input.numel() // n, _DTYPES[input.dtype],
                               stream_of(input.device)):
                output.view(-1).copy_(recv)
                return self._ran([output])
        return self.fallback.alltoall_base(output, input, output_split_sizes,
                                           input_split_sizes, opts)

    def broadcast(self, tensors, opts=None):
        from .coll import _DTYPES
        from ._torch import stream_of

        opts = opts if opts is not None else _opts("BroadcastOptions")
        if len(tensors) == 1 and self._ok(tensors[0]) and opts.rootTensor == 0:
            t = tensors[0]
            coll = self.comm._collectives()
            send, recv = self._staging(t.numel() * t.element_size(), t.dtype)
            if self.rank() == opts.rootRank:
                send.copy_(t.view(-1))
            if self._plan_only(_lib.coll().cchan_coll_broadcast, coll._open(), send.data_ptr(),
                               recv.data_ptr(), t.numel(), _DTYPES[t.dtype], int(opts.rootRank),
                               stream_of(t.device)):
                t.view(-1).copy_(recv)
                return self._ran(tensors)
        return self.fallback.broadcast(tensors, opts)

    def barrier(self, opts=None):
        if self.comm.closed:
            return self.fallback.barrier(opts if opts is not None else _opts("BarrierOptions"))
        self.comm.barrier()
        return self._ran()

    def close(self):
        """Collective: the cchan communicator (the gloo group goes with this object)."""
        # The registrations hold the staging tensors: drop both while the interpreter is whole,
        # not in its final garbage collection.
        if getattr(self, "_stage", None) and not self.comm.closed:
            coll = self.comm._collectives()
            for t in self._stage:
                coll.deregister(t)
        self._stage = []
        self._stage_bytes = 0
        self.comm.close()


def _fallback_method(name):
    def method(self, *a, **kw):
        return getattr(self.fallback, name)(*a, **kw)

    method.__name__ = name
    method.__doc__ = f"Through the gloo process group: cchan has no {name} path."
    return method


for _name in ("allreduce_coalesced", "allgather_coalesced", "alltoall", "gather", "scatter",
              "reduce", "send", "recv", "recv_anysource", "monitored_barrier"):
    setattr(ProcessGroupCchan, _name, _fallback_method(_name))


def register_backend(name=BACKEND_NAME, platform="auto"):
    """Registers the backend `name` with torch.distributed (once per process; a second call with
    the same name does nothing). platform: the cchan communicator's ('auto': CUDA where torch
    sees a GPU and libcchan has CUDA, else the host backend; 'host' for CPU tensors on a GPU
    machine). Returns the name to pass to init_process_group."""
    dist = _dist()
    Backend = dist.Backend
    if name.upper() in getattr(Backend, "_plugins", {}):
        return name

    # torch calls the creator (extended_api=False) as creator(store, rank, size, timeout), timeout
    # the group's datetime.timedelta (init_process_group's or new_group's; torch's default, 30
    # minutes, where the caller gave none): 1.13 and 2.x alike.
    def create(store, rank, size, timeout=datetime.timedelta(minutes=30)):
        return ProcessGroupCchan(store, rank, size, timeout, platform=platform)

    params = inspect.signature(Backend.register_backend).parameters
    if "devices" in params:
        # torch 2.x maps devices to backends ("cuda:cchan,cpu:gloo", "cpu:cchan"); a
        # ProcessGroup subclass made by the creator serves the whole group, every device.
        Backend.register_backend(name, create, extended_api=False, devices=["cpu", "cuda"])
    else:
        Backend.register_backend(name, create, extended_api=False)
    return name


def device_backend_strings():
    """Whether this torch takes device-mapped backend strings ("cpu:cchan"): torch 2.0 and
    later; 1.13 takes the plain name, which serves every device."""
    return "devices" in inspect.signature(_dist().Backend.register_backend).parameters


__all__ = ["register_backend", "ProcessGroupCchan", "BACKEND_NAME", "device_backend_strings"]
