"""AllToAll, all pairs: rank r puts chunk p of its input into chunk r of rank p's output.

One thread block per peer: a handshake (the peer is in this run), put + signal, and a wait for the
peer's chunk. Block 0 also copies the rank's own chunk.
"""
from cchan.dsl import AllToAll, Program

VARIANTS = {"alltoall_allpairs_mem": {}}
RANKS = (2, 4, 8)


def program(nranks):
    prog = Program("alltoall_allpairs_mem", AllToAll(nranks))
    for r in range(nranks):
        for tb, p in enumerate([(r + k) % nranks for k in range(1, nranks)]):
            ch = prog.memory_channel(r, p)
            ch.signal(tb)
            ch.wait(tb)
            ch.put(prog.output(p)[r], prog.input(r)[p], tb)
            ch.signal(tb)
            ch.wait(tb)
        prog.copy(prog.output(r)[r], prog.input(r)[r], tb=0)
    return prog
