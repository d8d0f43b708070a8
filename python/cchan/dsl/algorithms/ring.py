"""Ring ReduceScatter with compute/communication overlap, and the two-phase ring AllReduce (2PR).

ReduceScatter: N ranks in a ring, the input N chunks of two halves each. In step s (0 .. N-2)
rank r sends chunk (r - s - 1) mod N to rank r+1: in step 0 its own input, later its input plus
what rank r-1 sent in step s-1. After N-1 steps chunk r, fully reduced, is at rank r.
The halves overlap computation with communication: as soon as the first half of the previous step
has arrived, rank r adds it and sends it on, while the second half is still in flight; then the
second half is added while the first travels. Every step receives into its own scratch slots, so
no send has to wait for the receiver to drain a slot, and with port channels (asynchronous DMA)
a block never waits for its own puts except by the single flush at the end.

AllReduce (2PR) adds the AllGather ring: rank r sends its reduced chunk around the ring straight
into the peers' outputs.

With loop_unit set, the steps repeat over successive slices of every chunk (a pipeline whose plan
size does not depend on the message size). One thread block per rank.
"""
from cchan.dsl import AllReduce, Program, ReduceScatter

VARIANTS = {
    "reducescatter_ring_mem": {"collective": "reducescatter", "channel": "memory"},
    "reducescatter_ring_port": {"collective": "reducescatter", "channel": "port"},
    "allreduce_ring_mem": {"collective": "allreduce", "channel": "memory"},
    "allreduce_ring_port": {"collective": "allreduce", "channel": "port"},
}
RANKS = (2, 4, 8)
HALVES = 2


def program(nranks, collective="reducescatter", channel="memory", loop_unit=1 << 20):
    n, tb = nranks, 0
    kind = {"reducescatter": ReduceScatter, "allreduce": AllReduce}[collective]
    coll = kind(n, chunks=HALVES) if collective == "reducescatter" else kind(n, chunks=n * HALVES)
    prog = Program(f"{collective}_ring_{'mem' if channel == 'memory' else 'port'}", coll,
                   loop_unit=loop_unit, min_bytes=1 << 20)
    steps = n - 1
    make = prog.memory_channel if channel == "memory" else prog.port_channel
    for r in range(n):
        nxt, prv = (r + 1) % n, (r - 1) % n
        send, recv = make(r, nxt), make(r, prv)
        inp, out, scr = prog.input(r), prog.output(r), prog.scratch(r)
        next_scr = prog.scratch(nxt)

        def chunk(c, h):  # half h of chunk c, as a chunk index
            return c * HALVES + h

        def recv_slot(s, h):  # where step s's half h lands
            return s * HALVES + h

        def acc_slot(s, h):  # where step s's half h is summed before it is sent
            return steps * HALVES + (s - 1) * HALVES + h

        def result(h):  # where the fully reduced half h of chunk r goes
            return out[h] if collective == "reducescatter" else out[chunk(r, h)]

        # Handshake: rank r writes into rank r+1's scratch only once r+1 is in this run.
        recv.signal(tb)
        send.wait(tb)
        with prog.loop():
            for h in range(HALVES):  # step 0: own input
                c = (r - 1) % n
                send.put(next_scr[recv_slot(0, h)], inp[chunk(c, h)], tb)
                send.signal(tb)
            for s in range(1, steps):
                c = (r - s - 1) % n
                for h in range(HALVES):
                    recv.wait(tb)  # half h of step s-1 has arrived; half h+1 may still travel
                    acc = scr[acc_slot(s, h)]
                    prog.reduce(acc, [inp[chunk(c, h)], scr[recv_slot(s - 1, h)]], tb)
                    send.put(next_scr[recv_slot(s, h)], acc, tb)
                    send.signal(tb)
            for h in range(HALVES):  # the last step delivers chunk r
                recv.wait(tb)
                prog.reduce(result(h), [inp[chunk(r, h)], scr[recv_slot(steps - 1, h)]], tb)
            if collective == "allreduce":
                for t in range(steps):
                    c = (r - t) % n
                    for h in range(HALVES):
                        if t > 0:
                            recv.wait(tb)
                        send.put(prog.output(nxt)[chunk(c, h)], out[chunk(c, h)], tb)
                        send.signal(tb)
                for h in range(HALVES):
                    recv.wait(tb)
            if channel == "port":
                send.flush(tb)
    return prog
