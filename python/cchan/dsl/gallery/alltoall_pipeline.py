"""AllToAll, pipelined through scratch: for each peer a sender block puts its chunk into the
peer's scratch slice by slice (a loop over `loop_unit` slices) and a receiver block copies each
arrived slice into the output, so copying slice i overlaps the transfer of slice i + 1. Sender and
receiver drive separate channels (index 0 carries data up the rank order, index 1 down)."""
from cchan.dsl import AllToAll, Program

VARIANTS = {"alltoall_pipeline": {}}
RANKS = (2, 4, 8)


def program(nranks, loop_unit=1 << 18):
    n = nranks
    prog = Program("alltoall_pipeline", AllToAll(n), loop_unit=loop_unit)
    for r in range(n):
        for k, p in enumerate([(r + j) % n for j in range(1, n)]):
            send = prog.memory_channel(r, p, index=0 if r < p else 1)
            recv = prog.memory_channel(r, p, index=0 if p < r else 1)
            slot = lambda a, b: a if a < b else a - 1  # noqa: E731  a's slot in b's scratch
            recv.signal(2 * k + 1)  # p may write into my scratch
            send.wait(2 * k)
            with prog.loop():
                send.put(prog.scratch(p)[slot(r, p)], prog.input(r)[p], 2 * k)
                send.signal(2 * k)
                recv.wait(2 * k + 1)
                prog.copy(prog.output(r)[p], prog.scratch(r)[slot(p, r)], 2 * k + 1)
        prog.copy(prog.output(r)[r], prog.input(r)[r], 0)
    return prog
