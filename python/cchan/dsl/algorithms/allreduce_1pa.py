"""AllReduce, one phase, all pairs, on LL packets (1PA): for small messages.

Every rank writes its whole input as LL packets into a slot of every peer's scratch, then adds
its own input and the N-1 packet slots into its output. No semaphore at all: the packets' flags
synchronize, and the scratch is double-buffered by run (plan-format.md), so back-to-back runs need
no handshake. Thread block k sends to the k-th peer; all blocks then share the reduction.
"""
from cchan.dsl import AllReduce, Program, TBGroup

VARIANTS = {"allreduce_1pa_ll": {"protocol": "ll16"}}
RANKS = (2, 4, 8)


def program(nranks, protocol="ll16"):
    prog = Program("allreduce_1pa_ll", AllReduce(nranks), protocol=protocol, max_bytes=1 << 16)

    def slot(sender, receiver):  # where sender's packets land in receiver's scratch
        return sender if sender < receiver else sender - 1

    for r in range(nranks):
        peers = [(r + k) % nranks for k in range(1, nranks)]
        for tb, p in enumerate(peers):
            ch = prog.memory_channel(r, p)
            ch.put_packets(prog.scratch(p)[slot(r, p)], prog.input(r)[0], tb)
        srcs = [prog.input(r)[0]] + [prog.scratch(r)[slot(p, r)] for p in peers]
        prog.reduce_packets(prog.output(r)[0], srcs, TBGroup(range(len(peers))))
    return prog
