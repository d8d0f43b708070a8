# cchan-run -n 2 python3 allreduce.py     (or torchrun --nproc_per_node 2 allreduce.py)
import torch

import cchan

with cchan.Comm() as comm:  # rank and size from the launcher; a GPU each where torch sees one
    x = torch.full((1024,), float(comm.rank + 1), device=comm.device)
    y = comm.all_reduce(x)  # out of place; comm.all_reduce(x, out=x) in place
    assert torch.all(y == comm.size * (comm.size + 1) / 2)

    ar = cchan.CustomAllreduce(comm, max_size=8 << 20)  # vLLM's custom all-reduce interface
    z = ar.all_reduce(x) if ar.should_custom_ar(x) else comm.all_reduce(x)
    ar.close()
    print(f"rank {comm.rank}/{comm.size} on {comm.device}: {y[:3].tolist()} {z[:3].tolist()}")
