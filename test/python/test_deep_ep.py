"""cchan.deep_ep as `deep_ep` under cchan-run, on CPU tensors (host backend): the documented switch
(cchan.deep_ep.install(), then `import deep_ep`), a Buffer made with vLLM's keywords from a gloo
process group (enable_shrink=True among them), low-latency dispatch+combine round trips in bf16
and fp8 against a Python reference, the handle as DeepEP's 5-tuple, the mask-buffer calls, and
the refusals by name (multi-host settings: ValueError before any collective; what cchan_moe lacks:
NotImplementedError).

    cchan-run -n 2 /usr/bin/python3 test/python/test_deep_ep.py

Exit 0 when every check passed on every rank, 77 (skip) without torch.
"""

import os
import sys
import traceback

try:
    import torch
except ImportError as e:
    print(f"SKIP: the Python tests need torch ({e}); Debian: apt-get install python3-torch")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import torch.distributed as dist  # noqa: E402

import cchan  # noqa: E402
import cchan.deep_ep  # noqa: E402

cchan.deep_ep.install()  # the documented switch; a framework's `import deep_ep` comes after
import deep_ep  # noqa: E402

RANK = int(os.environ["CCHAN_RANK"])
SIZE = int(os.environ["CCHAN_WORLD_SIZE"])
session = os.environ.get("CCHAN_BOOTSTRAP_SESSION", "x")
store = f"/tmp/cchan-deepep-{session}-{os.getppid()}"
dist.init_process_group("gloo", init_method=f"file://{store}", rank=RANK, world_size=SIZE)
failures = []
checks = [0]


def expect(cond, what):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print(f"[r{RANK}] FAIL: {what}", flush=True)


def raises(exc, part, fn, *a, **kw):
    """fn(*a, **kw) must raise exc with `part` in its message (the argument's name)."""
    checks[0] += 1
    try:
        fn(*a, **kw)
    except exc as e:
        if part not in str(e):
            failures.append(f"{getattr(fn, '__name__', fn)}: '{e}' lacks '{part}'")
            print(f"[r{RANK}] FAIL: message lacks '{part}': {e}", flush=True)
        return
    except Exception as e:  # noqa: BLE001
        failures.append(f"{getattr(fn, '__name__', fn)}: raised {type(e).__name__}: {e}, want "
                        f"{exc.__name__}")
        print(f"[r{RANK}] FAIL: {failures[-1]}", flush=True)
        return
    failures.append(f"{getattr(fn, '__name__', fn)}: did not raise {exc.__name__} ({part})")
    print(f"[r{RANK}] FAIL: {failures[-1]}", flush=True)


E, H, K, B = 4 * SIZE, 256, 3, 8
L = E // SIZE


def routing(rank, seed):
    """Rank `rank`'s tokens and routing for pass `seed`, the same on every rank: T tokens, top-K
    distinct experts each (-1 for some), weights in [0.5, 1.5)."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    T = 2 + (rank + seed) % (B - 1)
    x = (torch.randint(-64, 64, (T, H), generator=g).float() / 16).to(torch.bfloat16)
    topk = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])
    topk = topk.to(deep_ep.topk_idx_t)
    topk[0, K - 1] = -1
    w = torch.rand((T, K), generator=g) + 0.5
    return x, topk, w


def expected_counts(seed):
    c = torch.zeros(E, dtype=torch.int32)
    for r in range(SIZE):
        _, topk, _ = routing(r, seed)
        for e in topk.flatten().tolist():
            if e >= 0:
                c[e] += 1
    return c[RANK * L:(RANK + 1) * L]


def case_switch():
    expect(deep_ep is cchan.deep_ep and sys.modules["deep_ep"] is cchan.deep_ep,
           "install(): import deep_ep gives cchan.deep_ep")
    from deep_ep import Buffer, Config, EventOverlap  # noqa: F401 - the names DeepEP exports

    expect(deep_ep.topk_idx_t is torch.int64, f"topk_idx_t {deep_ep.topk_idx_t}")
    expect(cchan.deep_ep.install() is deep_ep, "install() again: harmless")
    cfg = Buffer.get_dispatch_config(SIZE)
    expect(isinstance(cfg, Config) and cfg.get_nvl_buffer_size_hint(H * 2, SIZE) == 0
           and cfg.get_rdma_buffer_size_hint(H * 2, SIZE) == 0, f"config hints {cfg}")
    expect(isinstance(Buffer.capture(), EventOverlap), "Buffer.capture(): an EventOverlap")


def case_refusals():
    # multi-host settings: ValueError naming the argument, before any collective call
    raises(ValueError, "allow_mnnvl", deep_ep.Buffer, None, allow_mnnvl=True)
    raises(ValueError, "use_fabric", deep_ep.Buffer, None, use_fabric=True)
    raises(ValueError, "allow_nvlink_for_low_latency_mode", deep_ep.Buffer, None,
           low_latency_mode=True, allow_nvlink_for_low_latency_mode=False)
    raises(ValueError, "comm", deep_ep.Buffer, None, comm=object())
    raises(ValueError, "num_qps_per_rank", deep_ep.Buffer, None, low_latency_mode=True,
           num_qps_per_rank=0)
    raises(ValueError, "num_ranks", deep_ep.Buffer.get_combine_config, 64)


def case_round_trip():
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(B, H, SIZE, E)
    group = dist.group.WORLD
    # vLLM's DeepEP low-latency manager's keywords
    buf = deep_ep.Buffer(group, num_nvl_bytes=0, num_rdma_bytes=hint, low_latency_mode=True,
                         num_qps_per_rank=L, allow_nvlink_for_low_latency_mode=True,
                         allow_mnnvl=False, explicitly_destroy=True, enable_shrink=True)
    expect((buf.rank, buf.group_size, buf.group) == (RANK, SIZE, group) and buf.enable_shrink,
           f"attributes: {buf.rank} {buf.group_size} {buf.enable_shrink}")
    dev = buf.comm.device

    # bf16: experts return their rows unchanged, so combined[t] = sum of the valid weights * x[t]
    x, topk, w = routing(RANK, 1)
    recv_x, count, handle, event, hook = buf.low_latency_dispatch(
        x.to(dev), topk.to(dev), B, E, use_fp8=False)
    expect(hook is None and isinstance(event, deep_ep.EventOverlap), "dispatch: hook / event")
    expect(tuple(recv_x.shape) == (L, SIZE * B, H) and recv_x.dtype == torch.bfloat16,
           f"recv_x {tuple(recv_x.shape)} {recv_x.dtype}")
    expect(torch.equal(count.cpu(), expected_counts(1)), f"recv_count {count.tolist()}")
    # the handle as DeepEP's 5-tuple
    expect(isinstance(handle, tuple) and len(handle) == 5, f"handle: a 5-tuple, got {handle!r}")
    src_info, layout_range, max_tokens, hidden, experts = handle
    expect((max_tokens, hidden, experts) == (B, H, E) and handle[2:] == (B, H, E),
           f"handle[2:] {handle[2:]}")
    expect(isinstance(handle[0], cchan.moe.Handle) and layout_range is None, "handle[0], [1]")
    # rows of each local expert: the tokens routed to it, rank by rank, each rank's in order
    for e in range(L):
        want = [routing(r, 1)[0][t] for r in range(SIZE)
                for t in range(routing(r, 1)[1].shape[0])
                if RANK * L + e in routing(r, 1)[1][t].tolist()]
        got = recv_x[e].cpu()
        n = int(count[e])
        ok = n == len(want) and all(torch.equal(got[i], want[i]) for i in range(n))
        expect(ok, f"dispatch rows of local expert {e}")
    comb, event, hook = buf.low_latency_combine(recv_x, topk.to(dev), w.to(dev), handle)
    ref = (x.float() * (w * (topk >= 0)).sum(1, keepdim=True)).to(torch.bfloat16)
    expect(torch.allclose(comb.cpu().float(), ref.float(), rtol=1e-2, atol=1e-2),
           f"combine: max error {(comb.cpu().float() - ref.float()).abs().max()}")

    # fp8 with the recv hook: a constant expert output c gives combined[t] = c * sum of weights
    x, topk, w = routing(RANK, 2)
    recv_x, count, handle, event, hook = buf.low_latency_dispatch(
        x.to(dev), topk.to(dev), B, E, use_fp8=True, return_recv_hook=True)
    expect(callable(hook), "return_recv_hook: a hook")
    hook()
    values, scales = recv_x
    expect(tuple(values.shape) == (L, SIZE * B, H)
           and tuple(scales.shape) == (L, SIZE * B, H // 128) and scales.dtype == torch.float32,
           f"fp8 recv_x {tuple(values.shape)} {tuple(scales.shape)}")
    expect(torch.equal(count.cpu(), expected_counts(2)), f"fp8 recv_count {count.tolist()}")
    y = torch.full((L, SIZE * B, H), 0.5, dtype=torch.bfloat16, device=dev)
    out = torch.empty((x.shape[0], H), dtype=torch.bfloat16, device=dev)
    comb, _, _ = buf.low_latency_combine(y, topk.to(dev), w.to(dev), handle, out=out)
    ref = (0.5 * (w * (topk >= 0)).sum(1, keepdim=True)).expand(-1, H)
    expect(comb is out and torch.allclose(comb.cpu().float(), ref, rtol=1e-2, atol=1e-2),
           "fp8 combine with out=")

    # shrink: no rank is ever masked; masking one is refused by name
    status = torch.full((SIZE,), 7, dtype=torch.int32, device=dev)
    buf.low_latency_query_mask_buffer(status)
    expect(bool((status.cpu() == 0).all()), f"query_mask_buffer: {status.tolist()}")
    buf.low_latency_update_mask_buffer(SIZE - 1, False)
    buf.low_latency_clean_mask_buffer()
    raises(NotImplementedError, "mask", buf.low_latency_update_mask_buffer, SIZE - 1, True)
    raises(ValueError, "rank_to_mask", buf.low_latency_update_mask_buffer, SIZE, False)
    raises(TypeError, "mask_status", buf.low_latency_query_mask_buffer,
           torch.zeros(SIZE, dtype=torch.int64, device=dev))

    # what cchan_moe lacks: NotImplementedError naming it (checked before any communication)
    d = buf.low_latency_dispatch
    raises(NotImplementedError, "round_scale", d, x.to(dev), topk.to(dev), B, E, round_scale=True)
    raises(NotImplementedError, "use_ue8m0", d, x.to(dev), topk.to(dev), B, E, use_ue8m0=True)
    raises(NotImplementedError, "zero_copy", buf.low_latency_combine, y, topk.to(dev),
           w.to(dev), handle, zero_copy=True)
    raises(NotImplementedError, "handle", buf.get_next_low_latency_combine_buffer, handle)
    raises(NotImplementedError, "get_local_buffer_tensor", buf.get_local_buffer_tensor,
           torch.bfloat16)
    raises(NotImplementedError, "dispatch", buf.dispatch, x)
    raises(TypeError, "handle", buf.low_latency_combine, y, topk.to(dev), w.to(dev),
           (None, None, B, H, E))
    buf.clean_low_latency_buffer(B, H, E)
    buf.destroy()  # explicitly_destroy=True: collective, every rank
    raises(cchan.ClosedError, "buffer", d, x.to(dev), topk.to(dev), B, E)

    # without enable_shrink / explicitly_destroy, DeepEP refuses those calls too
    plain = deep_ep.Buffer(group, low_latency_mode=True)
    raises(ValueError, "enable_shrink", plain.low_latency_clean_mask_buffer)
    raises(ValueError, "explicitly_destroy", plain.destroy)
    plain.close()  # collective: its communicator too
    expect(plain.comm.closed, "close(): the communicator made from the group closed")


CASES = [case_switch, case_refusals, case_round_trip]
for case in CASES:
    name = case.__name__[5:]
    before = len(failures)
    try:
        case()
    except Exception:  # noqa: BLE001 - report and go on
        failures.append(f"{name}: {traceback.format_exc()}")
        print(f"[r{RANK}] FAIL: {name} raised:\n{traceback.format_exc()}", flush=True)
    if RANK == 0:
        print(f"{'ok  ' if len(failures) == before else 'FAIL'} {name}", flush=True)
    dist.barrier()

# Left open on purpose: its __del__ at interpreter shutdown must neither wait for a peer nor raise
# (docs/python.md, CustomAllreduce).
_left_at_exit = cchan.CustomAllreduce(None, max_size=1 << 20)

v = torch.tensor([len(failures)], dtype=torch.int64)
dist.all_reduce(v)
dist.barrier()
if RANK == 0:
    try:
        os.unlink(store)
    except OSError:
        pass
    print(f"test_deep_ep ({SIZE} ranks): {checks[0]} checks on rank 0, {int(v)} failures over all "
          f"ranks")
dist.destroy_process_group()
sys.exit(1 if int(v) else 0)
