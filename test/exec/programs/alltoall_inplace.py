"""AllToAll in place (the executor's in-place path for AllToAll): every rank's input is its output.
For each peer p, rank r puts its chunk p into p's scratch, signals, waits for p's chunk r in its own
scratch, then copies it over its chunk p (sent already, so free to overwrite). Its own chunk stays
where it is."""
from cchan.dsl import AllToAll, Program

VARIANTS = {"exec_alltoall_inplace": {}}
RANKS = (2, 4, 8)


def program(nranks):
    prog = Program("exec_alltoall_inplace", AllToAll(nranks), inplace=True)
    for r in range(nranks):
        for tb, p in enumerate([(r + k) % nranks for k in range(1, nranks)]):
            ch = prog.memory_channel(r, p)
            ch.signal(tb)
            ch.wait(tb)
            ch.put(prog.scratch(p)[r], prog.output(r)[p], tb)
            ch.signal(tb)
            ch.wait(tb)
            prog.copy(prog.output(r)[p], prog.scratch(r)[p], tb)
    return prog
