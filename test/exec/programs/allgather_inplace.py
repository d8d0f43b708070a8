"""AllGather, all pairs, in place (the executor's in-place path): every rank's input is its own
block of its output; it puts that block straight into every peer's output. With instances 2 every
chunk is cut in two and the program runs twice over, on twice the blocks and channels."""
from cchan.dsl import AllGather, Program

VARIANTS = {"exec_allgather_inplace": {"instances": 1},
            "exec_allgather_inplace_x2": {"instances": 2}}
RANKS = (2, 4, 8)


def program(nranks, instances=1):
    prog = Program("exec_allgather_inplace" + ("_x%d" % instances if instances > 1 else ""),
                   AllGather(nranks), inplace=True, instances=instances)
    for r in range(nranks):
        peers = [(r + k) % nranks for k in range(1, nranks)]
        for tb, p in enumerate(peers):
            ch = prog.memory_channel(r, p)
            ch.signal(tb)
            ch.wait(tb)
            ch.put(prog.output(p)[r], prog.output(r)[r], tb)
            ch.signal(tb)
            ch.wait(tb)
    return prog
