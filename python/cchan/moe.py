"""cchan.moe.Buffer: expert-parallel dispatch and combine over cchan_moe, with DeepEP V1's
low-latency interface (low_latency_dispatch / low_latency_combine: its arguments, return values
and layouts) and cchan's high-throughput dispatch / combine on tensors (ht_dispatch / ht_combine).

    buf = cchan.moe.Buffer(group, num_rdma_bytes=cchan.moe.Buffer.get_low_latency_rdma_size_hint(
              128, 7168, group.size(), 256), low_latency_mode=True)
    (x_fp8, scales), count, handle, event, hook = buf.low_latency_dispatch(x, topk_idx, 128, 256)
    y, event, hook = buf.low_latency_combine(expert_out, topk_idx, topk_weights, handle)

Differences from DeepEP are errors that name the argument (RDMA across hosts, UE8M0 scales,
LogFMT, zero-copy combine), never a silent change. The FP8 scales come as cchan's kernel writes
them: shape [local_experts, ranks * max_tokens, hidden / 128] like DeepEP's, but row-major
(DeepEP's are column-major in the last two dimensions: `s.transpose(1, 2).contiguous()
.transpose(1, 2)` gives those strides).
"""

import ctypes
import weakref

from . import _lib
from ._lib import check
from ._torch import ClosedError, check_out_overlap, check_tensor, fp8_dtype, stream_of, torch


def _moe_error():
    return _lib.moe().cchan_moe_last_error()


def _mcheck(status, call):
    return check(status, call, _moe_error)


class EventOverlap:
    """DeepEP's EventOverlap: the CUDA event recorded after an operation issued with
    async_finish=True (None otherwise). cchan runs on the caller's current stream, so waiting on it
    from that stream is already ordered."""

    def __init__(self, event=None, extra_tensors=None):
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self):
        if self.event is not None:
            torch.cuda.current_stream().wait_event(self.event)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.current_stream_wait()
        return False


def _event(async_finish, device):
    if async_finish and device.type == "cuda":
        e = torch.cuda.Event()
        e.record(torch.cuda.current_stream(device))
        return EventOverlap(e)
    return EventOverlap(None)


# ------------------------------------------------------------------ torch's allocator for C
# cchan_moe allocates per-handle device memory (the routing copy, row maps); through torch's caching
# allocator that memory is stream-ordered and legal while a CUDA graph is being captured.

_ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                             ctypes.POINTER(ctypes.c_void_p))
_FREE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


def _torch_alloc(ctx, nbytes, out):
    try:
        out[0] = torch.cuda.caching_allocator_alloc(int(nbytes))
        return 0
    except Exception:  # noqa: BLE001 - reported to the C caller as -ENOMEM
        return -12


def _torch_free(ctx, ptr):
    try:
        torch.cuda.caching_allocator_delete(ptr)
    except Exception:  # noqa: BLE001
        pass


_alloc_cb = _ALLOC_FN(_torch_alloc)
_free_cb = _FREE_FN(_torch_free)


class _Group:
    """A cchan_moe group of one shape; its handles are destroyed before it."""

    def __init__(self, comm, mode, num_experts, hidden, top_k, max_tokens, num_blocks):
        self.comm = comm
        self.key = (mode, num_experts, hidden, top_k, max_tokens)
        cfg = _lib.moe_config(mode, num_experts, hidden, top_k, max_tokens, num_blocks)
        if comm.platform == "cuda":
            cfg.alloc = ctypes.cast(_alloc_cb, ctypes.c_void_p)
            cfg.free = ctypes.cast(_free_cb, ctypes.c_void_p)
        out = ctypes.c_void_p()
        _mcheck(_lib.moe().cchan_moe_group_create(comm._ptr, ctypes.byref(cfg), ctypes.byref(out)),
                "cchan_moe_group_create")
        self._ptr = out
        self.handles = weakref.WeakSet()
        info = _lib.MoeInfo()
        _mcheck(_lib.moe().cchan_moe_group_info(out, ctypes.byref(info)), "cchan_moe_group_info")
        self.info = info

    def destroy(self):
        for h in list(self.handles):
            h._destroy()
        if self._ptr is not None:
            p, self._ptr = self._ptr, None
            _mcheck(_lib.moe().cchan_moe_group_destroy(p), "cchan_moe_group_destroy")


class Handle:
    """The routing of one forward pass (DeepEP's `handle`): pass it to the combine."""

    def __init__(self, group, topk32, num_tokens, stream, ht):
        self._group = group
        self._ptr = None
        self.ht = ht
        self.num_tokens = num_tokens
        self.top_k = group.key[3]
        self.hidden = group.key[2]
        self.pending = None  # "dispatch" / "combine" issued with send_only, not completed
        self.dispatched = False
        self._keep = ()
        out = ctypes.c_void_p()
        _mcheck(_lib.moe().cchan_moe_handle_create(
            group._ptr, topk32.data_ptr() if num_tokens else None, num_tokens, stream,
            ctypes.byref(out)), "cchan_moe_handle_create")
        self._ptr = out
        group.handles.add(self)

    def _open(self, name="handle"):
        if self._ptr is None:
            raise ClosedError(f"{name}: this handle was released (its buffer was closed or its "
                              f"group re-made for another shape); expected a live handle from "
                              f"this buffer's dispatch")
        return self._ptr

    def _complete(self, stream, after=None):
        _mcheck(_lib.moe().cchan_moe_complete(self._open(), stream), "cchan_moe_complete")
        self.pending = None
        if after is not None:
            after()

    def _destroy(self):
        if self._ptr is not None:
            p, self._ptr = self._ptr, None
            _lib.moe().cchan_moe_handle_destroy(p)
        self._keep = ()

    def __del__(self):
        try:
            g = self._group
            if self._ptr is not None and g is not None and g._ptr is not None:
                self._destroy()
        except Exception:  # noqa: BLE001
            pass


class Buffer:
    """DeepEP's Buffer over cchan_moe, for the ranks of one host.

    group: a torch.distributed process group (a cchan communicator is made from it, the unique id
    broadcast over it) or a cchan.Comm. num_rdma_bytes: with low_latency_mode, the bytes the
    low-latency buffer may take (0: as needed); get_low_latency_rdma_size_hint() gives a size
    enough for a shape. num_nvl_bytes, num_qps_per_rank and explicitly_destroy are accepted and
    unused (cchan sizes its high-throughput buffer from the shape, and has no QPs on one host).
    """

    num_sms = 20

    def __init__(self, group=None, num_nvl_bytes=0, num_rdma_bytes=0, low_latency_mode=False,
                 num_qps_per_rank=24, allow_nvlink_for_low_latency_mode=True, allow_mnnvl=False,
                 explicitly_destroy=False, *, num_blocks=0):
        from .comm import Comm

        if allow_mnnvl:
            raise NotImplementedError("allow_mnnvl: expected False; cchan's MoE runs over the GPUs "
                                      "of one host (no multi-node NVLink)")
        if not allow_nvlink_for_low_latency_mode:
            raise NotImplementedError("allow_nvlink_for_low_latency_mode: expected True; cchan's "
                                      "low-latency kernels move tokens over NVLink (no RDMA path)")
        if isinstance(group, Comm):
            self.comm, self._own_comm = group, False
        else:
            self.comm, self._own_comm = Comm.from_process_group(group), True
        c = self.comm
        c.check_open("group")
        if c.local_size != c.size:
            raise NotImplementedError(
                f"group: its {c.size} ranks span more than one host ({c.local_size} on this one); "
                f"cchan's MoE kernels run over the GPUs of one host (DeepEP's RDMA across hosts "
                f"has no counterpart here)")
        if c.size > _lib.MOE_MAX_RANKS:
            raise ValueError(f"group: expected at most {_lib.MOE_MAX_RANKS} ranks, got {c.size}")
        self.rank, self.group_size = c.rank, c.size
        self.num_nvl_bytes = int(num_nvl_bytes)
        self.num_rdma_bytes = int(num_rdma_bytes)
        self.low_latency_mode = bool(low_latency_mode)
        self.num_blocks = int(num_blocks)
        self._ll = None
        self._ht = None
        self._closed = False
        c._adopt(self)

    # ---------------------------------------------------------------- sizes

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks,
                                       num_experts, num_topk=_lib.MOE_MAX_TOPK):
        """Bytes of the low-latency buffer for this shape (an upper bound over top-k up to
        num_topk; pass the model's top-k for a tighter figure)."""
        return _lib.moe_ll_buffer_bytes(int(num_ranks), int(num_experts), int(hidden),
                                        int(num_topk), int(num_max_dispatch_tokens_per_rank))

    def get_local_buffer_info(self):
        """cchan_moe_info_t of the low-latency group as a dict (None before the first dispatch)."""
        if self._ll is None:
            return None
        i = self._ll.info
        return {f: getattr(i, f) for f, _ in _lib.MoeInfo._fields_}

    # ---------------------------------------------------------------- state

    def _check_open(self):
        if self._closed or self.comm.closed:
            raise ClosedError("buffer: this cchan.moe.Buffer (or its communicator) is closed; "
                              "expected an open Buffer")

    def close(self):
        """Collective: releases the groups (and every handle still alive)."""
        if self._closed:
            return
        self._closed = True
        for g in (self._ll, self._ht):
            if g is not None:
                g.destroy()
        self._ll = self._ht = None
        if self._own_comm:
            self.comm.close()

    destroy = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _group_for(self, mode, E, H, K, B):
        attr = "_ll" if mode == _lib.MOE_LOW_LATENCY else "_ht"
        g = getattr(self, attr)
        key = (mode, E, H, K, B)
        if g is not None and g.key == key:
            return g
        if mode == _lib.MOE_LOW_LATENCY and self.num_rdma_bytes > 0:
            need = _lib.moe_ll_buffer_bytes(self.group_size, E, H, K, B)
            if need > self.num_rdma_bytes:
                raise ValueError(
                    f"num_rdma_bytes: expected at least {need} bytes for "
                    f"num_max_dispatch_tokens_per_rank={B}, hidden={H}, num_experts={E}, "
                    f"top-k {K} on {self.group_size} ranks (get_low_latency_rdma_size_hint), "
                    f"the buffer was sized {self.num_rdma_bytes}")
        if g is not None:
            g.destroy()
            setattr(self, attr, None)
        g = _Group(self.comm, mode, E, H, K, B, self.num_blocks)
        setattr(self, attr, g)
        return g

    def _common_checks(self, x, topk_idx, num_experts, max_tokens, max_name, limit):
        dev = self.comm.device
        check_tensor(x, "x", dtypes=(torch.bfloat16,), device=dev, ndim=2)
        T, H = x.shape
        check_tensor(topk_idx, "topk_idx", dtypes=(torch.int64, torch.int32), device=dev,
                     shape=(T, None))
        K = topk_idx.shape[1]
        if not isinstance(max_tokens, int) or not 1 <= max_tokens <= limit:
            raise ValueError(f"{max_name}: expected an int in [1, {limit}], got {max_tokens!r}")
        if T > max_tokens:
            raise ValueError(f"x: expected at most {max_name} = {max_tokens} tokens (rows), got "
                             f"{T}")
        if not isinstance(num_experts, int) or num_experts < 1 or num_experts % self.group_size:
            raise ValueError(f"num_experts: expected a positive multiple of the "
                             f"{self.group_size} ranks, got {num_experts!r}")
        if H == 0 or H % 128:
            raise ValueError(f"x: expected hidden (dim 1) a positive multiple of 128, got {H}")
        if not 1 <= K <= _lib.MOE_MAX_TOPK:
            raise ValueError(f"topk_idx: expected 1 to {_lib.MOE_MAX_TOPK} columns (top-k), got "
                             f"{K}")
        topk32 = topk_idx if topk_idx.dtype == torch.int32 else topk_idx.to(torch.int32)
        return T, H, K, topk32

    # ---------------------------------------------------------------- low latency (DeepEP V1)

    def low_latency_dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                             cumulative_local_expert_recv_stats=None,
                             dispatch_wait_recv_cost_stats=None, use_fp8=True, round_scale=False,
                             use_ue8m0=False, async_finish=False, return_recv_hook=False):
        """DeepEP's low_latency_dispatch. x [T, hidden] bf16, topk_idx [T, top_k] int64 (or
        int32: no conversion kernel), T <= num_max_dispatch_tokens_per_rank.

        Returns (recv_x, recv_count, handle, event, hook): recv_x is [local_experts, ranks * max,
        hidden] bf16, or with use_fp8 a tuple (values float8_e4m3fn [local_experts, ranks * max,
        hidden] (uint8 on a torch without float8), scales float32 [local_experts, ranks * max,
        hidden / 128]; value = fp8 * scale); rows of expert e come rank by rank, each rank's in
        token order; recv_count int32 [local_experts] counts each expert's valid rows. With
        return_recv_hook the call only sends: recv_x and recv_count are written when hook() runs
        (on the stream current then)."""
        self._check_open()
        if not self.low_latency_mode:
            raise ValueError("low_latency_mode: expected a Buffer made with low_latency_mode=True "
                             "for low_latency_dispatch")
        if round_scale or use_ue8m0:
            name = "use_ue8m0" if use_ue8m0 else "round_scale"
            raise NotImplementedError(f"{name}: expected False; cchan's FP8 scales are float32 "
                                      f"amax / 448 per 128 channels (no power-of-two rounding)")
        if dispatch_wait_recv_cost_stats is not None:
            raise NotImplementedError("dispatch_wait_recv_cost_stats: expected None (cchan does "
                                      "not record per-rank wait times)")
        B = num_max_dispatch_tokens_per_rank
        T, H, K, topk32 = self._common_checks(x, topk_idx, num_experts, B,
                                              "num_max_dispatch_tokens_per_rank",
                                              _lib.MOE_LL_MAX_TOKENS)
        n, dev = self.group_size, self.comm.device
        L, NB = num_experts // n, n * B
        stats = cumulative_local_expert_recv_stats
        if stats is not None:
            check_tensor(stats, "cumulative_local_expert_recv_stats",
                         dtypes=(torch.int32, torch.int64), device=dev, shape=(L,))
        if self.comm.check_args:
            self.comm.agree("num_max_dispatch_tokens_per_rank", "low_latency_dispatch",
                            (num_experts, H, K, B, int(bool(use_fp8)), int(bool(return_recv_hook))),
                            lambda v: f"num_experts {v[0]}, hidden {v[1]}, top-k {v[2]}, "
                                      f"num_max_dispatch_tokens_per_rank {v[3]}, use_fp8 {v[4]}, "
                                      f"return_recv_hook {v[5]}")
        g = self._group_for(_lib.MOE_LOW_LATENCY, num_experts, H, K, B)
        stream = stream_of(dev)
        h = Handle(g, topk32, T, stream, ht=False)
        if use_fp8:
            out = torch.empty((L, NB, H), dtype=torch.uint8, device=dev)
            scales = torch.empty((L, NB, H // 128), dtype=torch.float32, device=dev)
        else:
            out = torch.empty((L, NB, H), dtype=torch.bfloat16, device=dev)
            scales = None
        counts = torch.empty((L,), dtype=torch.int32, device=dev)
        a = _lib.MoeDispatchArgs()
        a.x = x.data_ptr()
        a.dtype = _lib.MOE_FP8_E4M3 if use_fp8 else _lib.MOE_BF16
        a.out_x = out.data_ptr()
        a.out_scales = scales.data_ptr() if scales is not None else None
        a.out_counts = counts.data_ptr()
        _mcheck(_lib.moe().cchan_moe_dispatch(h._ptr, ctypes.byref(a), 1 if return_recv_hook
                                              else 0, stream), "cchan_moe_dispatch")
        h.dispatched = True
        h._keep = (x, topk32, out, scales, counts)
        recv_x = (out.view(fp8_dtype()) if use_fp8 else out)
        if use_fp8:
            recv_x = (recv_x, scales)

        def after():
            if stats is not None:
                stats.add_(counts.to(stats.dtype))

        hook = None
        if return_recv_hook:
            h.pending = "dispatch"

            def hook():
                h._complete(stream_of(dev), after)
        else:
            after()
        return recv_x, counts, h, _event(async_finish, dev), hook

    def low_latency_combine(self, x, topk_idx, topk_weights, handle, use_logfmt=False,
                            zero_copy=False, async_finish=False, return_recv_hook=False, out=None,
                            combine_wait_recv_cost_stats=None):
        """DeepEP's low_latency_combine. x [local_experts, ranks * max, hidden] bf16 (the expert
        outputs in dispatch's layout), topk_idx [T, top_k] and topk_weights [T, top_k] float32 of
        this rank's tokens, handle from the dispatch. Returns (combined_x [T, hidden] bf16, event,
        hook): combined_x[t] = sum_k topk_weights[t][k] * expert output of (t, k)."""
        self._check_open()
        if use_logfmt:
            raise NotImplementedError("use_logfmt: expected False; cchan's combine sends bf16")
        if zero_copy:
            raise NotImplementedError("zero_copy: expected False; cchan's combine reads x in "
                                      "place from the expert output tensor")
        if combine_wait_recv_cost_stats is not None:
            raise NotImplementedError("combine_wait_recv_cost_stats: expected None")
        if not isinstance(handle, Handle) or handle.ht:
            raise TypeError(f"handle: expected the handle low_latency_dispatch returned, got "
                            f"{type(handle).__name__}")
        hp = handle._open()
        g = handle._group
        if g is not self._ll:
            raise ValueError("handle: expected a handle of this buffer's current low-latency "
                             "group (it came from another buffer or an older shape)")
        if handle.pending == "dispatch":
            raise ValueError("handle: its dispatch was issued with return_recv_hook=True and the "
                             "hook has not run yet; expected hook() before the combine")
        dev = self.comm.device
        _, E, H, K, B = g.key
        L, NB, T = E // self.group_size, self.group_size * B, handle.num_tokens
        check_tensor(x, "x", dtypes=(torch.bfloat16,), device=dev, shape=(L, NB, H))
        check_tensor(topk_idx, "topk_idx", dtypes=(torch.int64, torch.int32), device=dev,
                     shape=(T, K), contiguous=False)
        check_tensor(topk_weights, "topk_weights", dtypes=(torch.float32,), device=dev,
                     shape=(T, K))
        if out is None:
            out = torch.empty((T, H), dtype=torch.bfloat16, device=dev)
        else:
            check_tensor(out, "out", dtypes=(torch.bfloat16,), device=dev, shape=(T, H))
            check_out_overlap(out, x, None, None)
        stream = stream_of(dev)
        _mcheck(_lib.moe().cchan_moe_combine(hp, x.data_ptr(), topk_weights.data_ptr(),
                                             out.data_ptr(), 1 if return_recv_hook else 0, stream),
                "cchan_moe_combine")
        handle._keep = handle._keep + (x, topk_weights, out)
        hook = None
        if return_recv_hook:
            handle.pending = "combine"

            def hook():
                handle._complete(stream_of(dev))
        return out, _event(async_finish, dev), hook

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank=None, hidden=None,
                                 num_experts=None):
        """DeepEP needs the buffer zeroed after a failed pass; cchan's counters carry epochs, so
        there is nothing to clean."""
        self._check_open()

    def get_next_low_latency_combine_buffer(self, handle):
        raise NotImplementedError("handle: cchan has no zero-copy combine buffer; pass the expert "
                                  "outputs to low_latency_combine (zero_copy=False)")

    # ---------------------------------------------------------------- high throughput (cchan's)

    def ht_dispatch(self, x, topk_idx, num_experts, num_max_tokens_per_rank, topk_weights=None,
                    async_finish=False):
        """cchan's high-throughput dispatch (GPUs of one host; synchronizes the stream once to
        exchange the token counts). x [T, hidden] bf16, topk_idx [T, top_k] int64/int32, every rank
        passing the same num_experts and num_max_tokens_per_rank (>= T on every rank).

        Returns (recv_x [rows, hidden] bf16, recv_topk_idx [rows, top_k] (local expert ids, -1 where
        the expert is on another rank; topk_idx's dtype), recv_topk_weights [rows, top_k] float32
        or None, num_recv_tokens_per_expert_list (ints), handle, event), as DeepEP's dispatch: rows
        are rank 0's tokens first, then rank 1's, each rank's in token order."""
        self._check_open()
        T, H, K, topk32 = self._common_checks(x, topk_idx, num_experts, num_max_tokens_per_rank,
                                              "num_max_tokens_per_rank", _lib.MOE_HT_MAX_TOKENS)
        dev = self.comm.device
        if topk_weights is not None:
            check_tensor(topk_weights, "topk_weights", dtypes=(torch.float32,), device=dev,
                         shape=(T, K))
        if self.comm.check_args:
            self.comm.agree("num_max_tokens_per_rank", "ht_dispatch",
                            (num_experts, H, K, num_max_tokens_per_rank,
                             int(topk_weights is not None)),
                            lambda v: f"num_experts {v[0]}, hidden {v[1]}, top-k {v[2]}, "
                                      f"num_max_tokens_per_rank {v[3]}, topk_weights "
                                      f"{'given' if v[4] else 'None'}")
        g = self._group_for(_lib.MOE_HIGH_THROUGHPUT, num_experts, H, K, num_max_tokens_per_rank)
        stream = stream_of(dev)
        h = Handle(g, topk32, T, stream, ht=True)
        rows = ctypes.c_int()
        _mcheck(_lib.moe().cchan_moe_handle_num_recv_tokens(h._ptr, stream, ctypes.byref(rows)),
                "cchan_moe_handle_num_recv_tokens")
        R, L = rows.value, num_experts // self.group_size
        out = torch.empty((R, H), dtype=torch.bfloat16, device=dev)
        otopk = torch.empty((R, K), dtype=torch.int32, device=dev)
        ow = torch.empty((R, K), dtype=torch.float32, device=dev) if topk_weights is not None \
            else None
        counts = torch.empty((L,), dtype=torch.int32, device=dev)
        a = _lib.MoeDispatchArgs()
        a.x = x.data_ptr()
        a.dtype = _lib.MOE_BF16
        a.out_x = out.data_ptr()
        a.out_counts = counts.data_ptr()
        a.topk_weights = topk_weights.data_ptr() if topk_weights is not None else None
        a.out_topk = otopk.data_ptr()
        a.out_weights = ow.data_ptr() if ow is not None else None
        _mcheck(_lib.moe().cchan_moe_dispatch(h._ptr, ctypes.byref(a), 0, stream),
                "cchan_moe_dispatch")
        h.dispatched = True
        h.rows = R
        h._keep = (x, topk32, topk_weights, out, otopk, ow, counts)
        recv_topk = otopk if topk_idx.dtype == torch.int32 else otopk.to(topk_idx.dtype)
        return (out, recv_topk, ow, counts.tolist(), h, _event(async_finish, dev))

    def ht_combine(self, x, handle, async_finish=False, out=None):
        """cchan's high-throughput combine: x [rows, hidden] bf16, one row per received token (the
        weighted sum over this rank's experts); returns (combined_x [T, hidden] bf16, event) with
        combined_x[t] = sum over the ranks t went to of their row for t."""
        self._check_open()
        if not isinstance(handle, Handle) or not handle.ht:
            raise TypeError(f"handle: expected the handle ht_dispatch returned, got "
                            f"{type(handle).__name__}")
        hp = handle._open()
        if handle._group is not self._ht:
            raise ValueError("handle: expected a handle of this buffer's current high-throughput "
                             "group")
        dev = self.comm.device
        H, T = handle.hidden, handle.num_tokens
        check_tensor(x, "x", dtypes=(torch.bfloat16,), device=dev, shape=(handle.rows, H))
        if out is None:
            out = torch.empty((T, H), dtype=torch.bfloat16, device=dev)
        else:
            check_tensor(out, "out", dtypes=(torch.bfloat16,), device=dev, shape=(T, H))
            check_out_overlap(out, x, None, None)
        _mcheck(_lib.moe().cchan_moe_combine(hp, x.data_ptr(), None, out.data_ptr(), 0,
                                             stream_of(dev)), "cchan_moe_combine")
        handle._keep = handle._keep + (x, out)
        return out, _event(async_finish, dev)

    def check(self):
        """Raises CchanError naming the first invalid expert id a kernel met (after the stream
        synchronized), or an expired device-side wait."""
        self._check_open()
        for g in (self._ll, self._ht):
            if g is not None:
                _mcheck(_lib.moe().cchan_moe_check(g._ptr), "cchan_moe_check")
