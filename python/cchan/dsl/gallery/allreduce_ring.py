"""AllReduce, ring, on parallel channels: a ReduceScatter ring through scratch, then an AllGather
ring into the peers' outputs. Chunk c of the N is cut into `channels` parts; part p runs on thread
block p over channels of index p, an independent ring of its own."""
from cchan.dsl import AllReduce, Program

VARIANTS = {"allreduce_ring_mem_x2": {"channel": "memory"},
            "allreduce_ring_port_x2": {"channel": "port"}}
RANKS = (2, 4, 8)


def program(nranks, channel="memory", channels=2):
    n, k = nranks, channels
    short = "mem" if channel == "memory" else "port"
    prog = Program(f"allreduce_ring_{short}_x{k}", AllReduce(n, chunks=n * k))
    make = prog.memory_channel if channel == "memory" else prog.port_channel
    for r in range(n):
        inp, out, scr, nxt = prog.input(r), prog.output(r), prog.scratch(r), (r + 1) % n
        for p in range(k):
            send, recv = make(r, nxt, index=p), make(r, (r - 1) % n, index=p)
            part = lambda c: c % n * k + p  # noqa: E731  part p of chunk c
            slot = lambda s: p * 2 * n + s  # noqa: E731  step s arrives here; sums at n + s
            recv.signal(p)
            send.wait(p)
            for s in range(n - 1):  # ReduceScatter: chunk r - s - 1 goes to r + 1
                src = inp[part(r - 1)]
                if s > 0:
                    recv.wait(p)
                    src = scr[slot(n + s)]
                    prog.reduce(src, [inp[part(r - s - 1)], scr[slot(s - 1)]], p)
                send.put(prog.scratch(nxt)[slot(s)], src, p)
                send.signal(p)
            recv.wait(p)
            prog.reduce(out[part(r)], [inp[part(r)], scr[slot(n - 2)]], p)
            for t in range(n - 1):  # AllGather: the reduced chunk r - t goes to r + 1
                if t > 0:
                    recv.wait(p)
                send.put(prog.output(nxt)[part(r - t)], out[part(r - t)], p)
                send.signal(p)
            recv.wait(p)
            if channel == "port":
                send.flush(p)
    return prog
