"""AllReduce, two phases, all pairs, in place (the executor's in-place path and its barrier): a
barrier first (no rank reads a peer's buffer before the peer is in this run), then rank r sums
chunk r of every rank's buffer, read straight from the peers, and puts the sum into every peer's
chunk r."""
from cchan.dsl import AllReduce, Program

VARIANTS = {"exec_allreduce_inplace": {}}
RANKS = (2, 4, 8)


def program(nranks):
    n = nranks
    prog = Program("exec_allreduce_inplace", AllReduce(n, chunks=n), inplace=True)
    prog.barrier(0)
    for r in range(n):
        peers = [(r + k) % n for k in range(1, n)]
        chans = {p: prog.memory_channel(r, p) for p in peers}
        out = prog.output(r)
        srcs = [out[r]] + [chans[p].remote(prog.output(p)[r]) for p in peers]
        prog.reduce(out[r], srcs, tb=0)
        for p in peers:
            chans[p].put(prog.output(p)[r], out[r], tb=0)
        for p in peers:
            chans[p].signal(0)
        for p in peers:
            chans[p].wait(0)
    return prog
