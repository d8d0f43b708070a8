# cchan-run -n 2 python3 moe_dispatch.py
import torch

import cchan
from cchan.moe import Buffer

with cchan.Comm() as comm:
    T, H, E, K = 64, 1024, 8 * comm.size, 4  # tokens per rank, hidden, experts, top-k
    buf = Buffer(comm, low_latency_mode=True,
                 num_rdma_bytes=Buffer.get_low_latency_rdma_size_hint(T, H, comm.size, E))
    torch.manual_seed(comm.rank)
    x = torch.randn(T, H).to(torch.bfloat16).to(comm.device)
    topk_idx = torch.stack([torch.randperm(E)[:K] for _ in range(T)]).to(comm.device)
    topk_weights = torch.softmax(torch.randn(T, K), dim=1).to(comm.device)

    # DeepEP's low-latency calls: recv_x is [local experts, ranks * T, H], count[e] rows valid
    recv_x, count, handle, event, hook = buf.low_latency_dispatch(
        x, topk_idx, T, E, use_fp8=False)
    expert_out = recv_x * 2  # each local expert's "FFN"
    y, event, hook = buf.low_latency_combine(expert_out, topk_idx, topk_weights, handle)

    # every token went to K experts whose outputs are 2x, weighted by a softmax: y = 2x
    assert torch.allclose(y.float(), 2 * x.float(), rtol=2e-2, atol=2e-2)
    print(f"rank {comm.rank}: {int(count.sum())} rows received, combine ok")
    buf.close()
