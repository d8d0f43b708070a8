"""Broadcast from rank 0, all pairs: the root puts its input into every peer's output.

The root uses one thread block per peer; each peer waits in block 0. Peers first signal the root
(they are in this run), the root puts and signals, and the peer's wait covers the data.
"""
from cchan.dsl import Broadcast, Program

VARIANTS = {"broadcast_allpairs_mem": {}}
RANKS = (2, 4, 8)


def program(nranks, root=0, chunks=1):
    prog = Program("broadcast_allpairs_mem", Broadcast(nranks, chunks=chunks, root=root))
    peers = [(root + k) % nranks for k in range(1, nranks)]
    for tb, p in enumerate(peers):
        down, up = prog.memory_channel(root, p), prog.memory_channel(p, root)
        up.signal(0)
        down.wait(tb)
        down.put(prog.output(p)[0:chunks], prog.input(root)[0:chunks], tb)
        down.signal(tb)
        up.wait(0)
    prog.copy(prog.output(root)[0:chunks], prog.input(root)[0:chunks], tb=0)
    return prog
