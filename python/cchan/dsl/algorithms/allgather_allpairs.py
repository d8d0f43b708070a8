"""AllGather, all pairs: every rank puts its input straight into every peer's output.

One thread block per peer. A handshake (signal, wait) first, so no rank writes into a peer's output
before the peer has entered the run; then put + signal (fused to put_signal; on port channels with
the flush, put_signal_flush) and a wait for the peer's data.
"""
from cchan.dsl import AllGather, Program

VARIANTS = {
    "allgather_allpairs_mem": {"channel": "memory"},
    "allgather_allpairs_port": {"channel": "port"},
}
RANKS = (2, 4, 8)


def program(nranks, channel="memory"):
    prog = Program("allgather_allpairs_" + {"memory": "mem", "port": "port"}[channel],
                   AllGather(nranks), min_bytes=0, max_bytes=0)
    for r in range(nranks):
        peers = [(r + k) % nranks for k in range(1, nranks)]
        for tb, p in enumerate(peers):
            ch = (prog.memory_channel if channel == "memory" else prog.port_channel)(r, p)
            ch.signal(tb)
            ch.wait(tb)
            ch.put(prog.output(p)[r], prog.input(r)[0], tb)
            ch.signal(tb)
            if channel == "port":
                ch.flush(tb)
            ch.wait(tb)
        prog.copy(prog.output(r)[r], prog.input(r)[0], tb=0)
    return prog
