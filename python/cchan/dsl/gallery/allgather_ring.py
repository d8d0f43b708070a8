"""AllGather, ring, on parallel channels: each rank's data cut into `channels` parts, part c on
thread block c and its own channel (index c) to each ring neighbour, so the parts travel as
independent rings (separate semaphores; on port channels, separate DMA queues).
In step t rank r forwards rank (r - t)'s part straight into the next rank's output."""
from cchan.dsl import AllGather, Program

VARIANTS = {"allgather_ring_mem": {"channel": "memory"},
            "allgather_ring_port": {"channel": "port"}}
RANKS = (2, 4, 8)


def program(nranks, channel="memory", channels=2):
    n, k = nranks, channels
    short = "mem" if channel == "memory" else "port"
    prog = Program(f"allgather_ring_{short}", AllGather(n, chunks=k))
    make = prog.memory_channel if channel == "memory" else prog.port_channel
    for r in range(n):
        out = prog.output(r)
        for c in range(k):
            send, recv = make(r, (r + 1) % n, index=c), make(r, (r - 1) % n, index=c)
            recv.signal(c)  # the previous rank may write into my output
            send.wait(c)
            prog.copy(out[r * k + c], prog.input(r)[c], c)
            for t in range(n - 1):
                src = prog.input(r)[c] if t == 0 else out[(r - t) % n * k + c]
                if t > 0:
                    recv.wait(c)  # rank r - t's part has arrived
                send.put(prog.output((r + 1) % n)[(r - t) % n * k + c], src, c)
                send.signal(c)
            recv.wait(c)
            if channel == "port":
                send.flush(c)
    return prog
