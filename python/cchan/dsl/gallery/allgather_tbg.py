"""AllGather, all pairs, with thread-block groups: each rank puts its input straight into every
peer's output, each put run by a group of `group` thread blocks, each block on its share of the
chunk. Block m of a group signals on its own parallel channel (index m): one block drives each
channel end, and the peer's waits on all of them cover every share of the put."""
from cchan.dsl import AllGather, Program, TBGroup

VARIANTS = {"allgather_tbg": {}}
RANKS = (2, 4, 8)


def program(nranks, group=2):
    prog = Program("allgather_tbg", AllGather(nranks))
    for r in range(nranks):
        for k, p in enumerate([(r + j) % nranks for j in range(1, nranks)]):
            blocks = [k * group + m for m in range(group)]
            chans = [prog.memory_channel(r, p, index=m) for m in range(group)]
            for ch, tb in zip(chans, blocks):  # p is in this run
                ch.signal(tb)
                ch.wait(tb)
            chans[0].put(prog.output(p)[r], prog.input(r)[0], TBGroup(blocks))
            for ch, tb in zip(chans, blocks):  # my share is in p's output; p's share in mine
                ch.signal(tb)
                ch.wait(tb)
        prog.copy(prog.output(r)[r], prog.input(r)[0], 0)
    return prog
