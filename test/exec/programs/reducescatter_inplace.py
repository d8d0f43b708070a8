"""ReduceScatter in place (the executor's in-place path for ReduceScatter): every rank's output is
its own chunk of its input (NCCL's convention). One thread block per peer p puts the rank's chunk p
into p's scratch (slot r) and waits for p's chunk r in return; block 0 then sums the rank's own
chunk and the peers' in place, once every other block has released a rank-local semaphore."""
from cchan.dsl import Program, ReduceScatter

VARIANTS = {"exec_reducescatter_inplace": {}}
RANKS = (2, 4, 8)


def program(nranks):
    prog = Program("exec_reducescatter_inplace", ReduceScatter(nranks), inplace=True)
    for r in range(nranks):
        peers = [(r + k) % nranks for k in range(1, nranks)]
        sems = []
        for tb, p in enumerate(peers):
            ch = prog.memory_channel(r, p)
            ch.signal(tb)
            ch.wait(tb)
            ch.put(prog.scratch(p)[r], prog.input(r)[p], tb)
            ch.signal(tb)
            ch.wait(tb)
            if tb:
                sems.append(prog.semaphore(r))
                sems[-1].release(tb)
        for s in sems:
            s.acquire(0)
        prog.reduce(prog.output(r)[0], [prog.input(r)[r]] + [prog.scratch(r)[q] for q in peers],
                    0)
    return prog
