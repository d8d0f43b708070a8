"""cchan.deep_ep: a module that answers to `import deep_ep` for code written against DeepEP V1's
low-latency interface (vLLM's DeepEP low-latency all-to-all, DeepEP's own low-latency tests), over
cchan_moe on the ranks of one host. The switch is one line before the framework imports deep_ep:

    import cchan.deep_ep; cchan.deep_ep.install()     # sys.modules["deep_ep"] = cchan.deep_ep

or, in code you write yourself, `import cchan.deep_ep as deep_ep`.

What it holds: Buffer (cchan.moe.Buffer with DeepEP's constructor, its tuple handle and its
mask-buffer calls), Config, EventOverlap, topk_idx_t. The dispatch and combine are
cchan.moe.Buffer's (this module only adapts the handle and the constructor); whatever cchan_moe
lacks is refused by name: ValueError for the multi-host settings (the constructor refuses before
any collective call), NotImplementedError for the calls and options that have no counterpart
(docs/python.md lists them).
"""

import sys

from . import _lib
from . import moe as _moe
from ._torch import check_tensor, torch

__all__ = ["Buffer", "Config", "EventOverlap", "LowLatencyHandle", "install", "topk_idx_t"]

# DeepEP's dtype of top-k expert indices (its default build: int64). cchan's dispatch also takes
# int32 routing as is.
topk_idx_t = torch.int64

EventOverlap = _moe.EventOverlap


def install(force=False):
    """Makes `import deep_ep` (and `from deep_ep import Buffer`) give this module; returns it.
    A different module already imported under that name (DeepEP itself) is kept unless force=True,
    since code that imported it holds its classes already."""
    mod = sys.modules[__name__]
    cur = sys.modules.get("deep_ep")
    if cur is not None and cur is not mod and not force:
        raise ImportError(f"deep_ep: expected no module imported under that name before "
                          f"cchan.deep_ep.install(), got {getattr(cur, '__file__', cur)!r} "
                          f"(install() first, or install(force=True))")
    sys.modules["deep_ep"] = mod
    return mod


class Config:
    """DeepEP's Config (the high-throughput kernels' chunking). Kept for the code that sizes
    num_nvl_bytes / num_rdma_bytes from it: cchan sizes its high-throughput buffer from the shape at
    the first call and has no RDMA buffer, so both hints are 0 bytes."""

    def __init__(self, num_sms=20, num_max_nvl_chunked_send_tokens=6,
                 num_max_nvl_chunked_recv_tokens=256, num_max_rdma_chunked_send_tokens=6,
                 num_max_rdma_chunked_recv_tokens=256):
        self.num_sms = int(num_sms)
        self.num_max_nvl_chunked_send_tokens = int(num_max_nvl_chunked_send_tokens)
        self.num_max_nvl_chunked_recv_tokens = int(num_max_nvl_chunked_recv_tokens)
        self.num_max_rdma_chunked_send_tokens = int(num_max_rdma_chunked_send_tokens)
        self.num_max_rdma_chunked_recv_tokens = int(num_max_rdma_chunked_recv_tokens)

    def get_nvl_buffer_size_hint(self, hidden_bytes, num_ranks):
        return 0

    def get_rdma_buffer_size_hint(self, hidden_bytes, num_ranks):
        return 0

    def __repr__(self):
        return (f"deep_ep.Config(num_sms={self.num_sms}, "
                f"nvl={self.num_max_nvl_chunked_send_tokens}/"
                f"{self.num_max_nvl_chunked_recv_tokens}, "
                f"rdma={self.num_max_rdma_chunked_send_tokens}/"
                f"{self.num_max_rdma_chunked_recv_tokens})")


class LowLatencyHandle(tuple):
    """low_latency_dispatch's handle as DeepEP's 5-tuple (src_info, layout_range,
    num_max_dispatch_tokens_per_rank, hidden, num_experts): [2], [3] and [4] are DeepEP's; [0] is
    the cchan.moe.Handle that holds the routing (DeepEP's receive-side source-info tensor has no
    counterpart: cchan keeps the row maps inside cchan_moe), [1] is None (likewise the layout
    ranges). Unpacks into five names as DeepEP's does; pass it to low_latency_combine."""

    def __new__(cls, routing, num_max_dispatch_tokens_per_rank, hidden, num_experts):
        return super().__new__(cls, (routing, None, num_max_dispatch_tokens_per_rank, hidden,
                                     num_experts))

    @property
    def routing(self):
        return self[0]


def _routing(handle):
    # Anything else reaches cchan.moe.Buffer as is, whose check names `handle`.
    return handle.routing if isinstance(handle, LowLatencyHandle) else handle


class Buffer(_moe.Buffer):
    """DeepEP V1's Buffer over cchan.moe.Buffer, for the ranks of one host (at most 8).

    Buffer(group, num_nvl_bytes=0, num_rdma_bytes=0, low_latency_mode=False, num_qps_per_rank=24,
           allow_nvlink_for_low_latency_mode=True, allow_mnnvl=False, explicitly_destroy=False,
           enable_shrink=False, comm=None, *, use_fabric=False, num_blocks=0)

    Positional order as DeepEP's current V1 (deep_ep/buffers/legacy.py); use_fabric, which older
    releases had before explicitly_destroy, is keyword-only here. The multi-host settings
    (allow_mnnvl=True, use_fabric=True, allow_nvlink_for_low_latency_mode=False, a group spanning
    hosts) and an mpi4py `comm` raise ValueError naming the argument. explicitly_destroy=False: the
    groups go when the communicator closes (a process group's: at exit), not in a destructor,
    since releasing them is collective."""

    def __init__(self, group=None, num_nvl_bytes=0, num_rdma_bytes=0, low_latency_mode=False,
                 num_qps_per_rank=24, allow_nvlink_for_low_latency_mode=True, allow_mnnvl=False,
                 explicitly_destroy=False, enable_shrink=False, comm=None, *, use_fabric=False,
                 num_blocks=0):
        # Refused before the communicator is made, so every rank raises without a collective.
        if allow_mnnvl:
            raise ValueError("allow_mnnvl: expected False; cchan's MoE runs over the GPUs of one "
                             "host (no multi-node NVLink)")
        if use_fabric:
            raise ValueError("use_fabric: expected False; fabric memory handles serve multi-node "
                             "NVLink, and cchan's MoE runs over the GPUs of one host")
        if not allow_nvlink_for_low_latency_mode:
            raise ValueError("allow_nvlink_for_low_latency_mode: expected True; cchan's "
                             "low-latency kernels move tokens between the GPUs of one host "
                             "directly (there is no RDMA path to fall back to)")
        if comm is not None:
            raise ValueError(f"comm: expected None (cchan makes its communicator from `group`, a "
                             f"torch.distributed process group or a cchan.Comm), got "
                             f"{type(comm).__name__}")
        if low_latency_mode and (not isinstance(num_qps_per_rank, int) or num_qps_per_rank < 1):
            raise ValueError(f"num_qps_per_rank: expected a positive int (as DeepEP; unused by "
                             f"cchan, which has no queue pairs on one host), got "
                             f"{num_qps_per_rank!r}")
        try:
            super().__init__(group, num_nvl_bytes, num_rdma_bytes, low_latency_mode,
                             num_qps_per_rank, allow_nvlink_for_low_latency_mode, allow_mnnvl,
                             explicitly_destroy, num_blocks=num_blocks)
        except NotImplementedError as e:  # a group spanning hosts: a setting DeepEP takes
            raise ValueError(str(e)) from e
        self.group = group
        self.num_qps_per_rank = num_qps_per_rank
        self.explicitly_destroy = bool(explicitly_destroy)
        self.enable_shrink = bool(enable_shrink)

    # ---------------------------------------------------------------- DeepEP's statics

    @staticmethod
    def set_num_sms(new_num_sms):
        """Kept as DeepEP's (it sizes DeepEP's high-throughput kernels; cchan's pick their blocks
        per shape, num_blocks= sets them)."""
        if not isinstance(new_num_sms, int) or new_num_sms < 2 or new_num_sms % 2:
            raise ValueError(f"new_num_sms: expected a positive even int, got {new_num_sms!r}")
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture():
        """An EventOverlap with an event recorded on the current CUDA stream (None without CUDA:
        on the host backend every call has finished when it returns)."""
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            e = torch.cuda.Event()
            e.record(torch.cuda.current_stream())
            return EventOverlap(e)
        return EventOverlap(None)

    @staticmethod
    def _config(num_ranks, what):
        if not isinstance(num_ranks, int) or not 1 <= num_ranks <= _lib.MOE_MAX_RANKS:
            raise ValueError(f"num_ranks: expected an int in [1, {_lib.MOE_MAX_RANKS}] (the ranks "
                             f"of one host) for {what}, got {num_ranks!r}")
        return Config(Buffer.num_sms)

    @staticmethod
    def get_dispatch_config(num_ranks):
        return Buffer._config(num_ranks, "get_dispatch_config")

    @staticmethod
    def get_combine_config(num_ranks):
        return Buffer._config(num_ranks, "get_combine_config")

    # ---------------------------------------------------------------- state

    def destroy(self):
        """As DeepEP's: only for a Buffer made with explicitly_destroy=True. Collective."""
        if not self.explicitly_destroy:
            raise ValueError("explicitly_destroy: expected a Buffer made with "
                             "explicitly_destroy=True for destroy() (close() releases any Buffer)")
        self.close()

    def get_local_buffer_tensor(self, dtype, size=None, offset=0, use_rdma_buffer=False):
        raise NotImplementedError("get_local_buffer_tensor: cchan_moe does not expose its "
                                  "communication buffer (cchan_moe_group_info gives its size, not "
                                  "its address); the dispatch and combine return new tensors")

    # ---------------------------------------------------------------- low latency

    def low_latency_dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                             cumulative_local_expert_recv_stats=None,
                             dispatch_wait_recv_cost_stats=None, use_fp8=True, round_scale=False,
                             use_ue8m0=False, async_finish=False, return_recv_hook=False):
        """cchan.moe.Buffer.low_latency_dispatch, its handle as DeepEP's tuple (LowLatencyHandle).
        round_scale / use_ue8m0 raise NotImplementedError there (float32 scales only)."""
        recv_x, count, h, event, hook = super().low_latency_dispatch(
            x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
            cumulative_local_expert_recv_stats=cumulative_local_expert_recv_stats,
            dispatch_wait_recv_cost_stats=dispatch_wait_recv_cost_stats, use_fp8=use_fp8,
            round_scale=round_scale, use_ue8m0=use_ue8m0, async_finish=async_finish,
            return_recv_hook=return_recv_hook)
        handle = LowLatencyHandle(h, num_max_dispatch_tokens_per_rank, x.size(1), num_experts)
        return recv_x, count, handle, event, hook

    def low_latency_combine(self, x, topk_idx, topk_weights, handle, use_logfmt=False,
                            zero_copy=False, async_finish=False, return_recv_hook=False, out=None,
                            combine_wait_recv_cost_stats=None):
        """cchan.moe.Buffer.low_latency_combine with DeepEP's tuple handle. use_logfmt and
        zero_copy raise NotImplementedError there."""
        return super().low_latency_combine(
            x, topk_idx, topk_weights, _routing(handle), use_logfmt=use_logfmt,
            zero_copy=zero_copy, async_finish=async_finish, return_recv_hook=return_recv_hook,
            out=out, combine_wait_recv_cost_stats=combine_wait_recv_cost_stats)

    def get_next_low_latency_combine_buffer(self, handle):
        return super().get_next_low_latency_combine_buffer(_routing(handle))

    # ---------------------------------------------------------------- shrink (rank masks)
    # cchan_moe has no rank mask: its dispatch and combine wait for every rank of the group. What
    # can be answered truthfully is: no rank is masked. Masking one is refused, since that rank
    # would still be waited for.

    def _check_shrink(self, call):
        self._check_open()
        if not self.enable_shrink:
            raise ValueError(f"enable_shrink: expected a Buffer made with enable_shrink=True for "
                             f"{call}")

    def low_latency_update_mask_buffer(self, rank_to_mask, mask=False):
        self._check_shrink("low_latency_update_mask_buffer")
        if not isinstance(rank_to_mask, int) or not 0 <= rank_to_mask < self.group_size:
            raise ValueError(f"rank_to_mask: expected an int in [0, {self.group_size}), got "
                             f"{rank_to_mask!r}")
        if mask:
            raise NotImplementedError(
                "mask: expected False; cchan_moe has no rank mask (its dispatch and combine wait "
                "for every rank of the group, so a masked rank would still be waited for); "
                "unmasking (mask=False) is accepted: no rank is ever masked")

    def low_latency_query_mask_buffer(self, mask_status):
        """Writes 0 (unmasked) for every rank into mask_status, int32 [num_ranks]."""
        self._check_shrink("low_latency_query_mask_buffer")
        check_tensor(mask_status, "mask_status", dtypes=(torch.int32,), device=self.comm.device,
                     shape=(self.group_size,), contiguous=False)
        mask_status.zero_()

    def low_latency_clean_mask_buffer(self):
        self._check_shrink("low_latency_clean_mask_buffer")

    # ---------------------------------------------------------------- high throughput

    def _no_ht(self, name):
        raise NotImplementedError(f"{name}: DeepEP's high-throughput interface (its layout and "
                                  f"handle tensors) is not provided; cchan.moe.Buffer's "
                                  f"ht_dispatch / ht_combine (also on this Buffer) are cchan's")

    def get_dispatch_layout(self, *a, **kw):
        self._no_ht("get_dispatch_layout")

    def dispatch(self, *a, **kw):
        self._no_ht("dispatch")

    def combine(self, *a, **kw):
        self._no_ht("combine")

    def internode_dispatch(self, *a, **kw):
        self._no_ht("internode_dispatch")

    def internode_combine(self, *a, **kw):
        self._no_ht("internode_combine")
