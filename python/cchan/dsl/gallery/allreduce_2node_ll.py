"""AllReduce over 2 hosts x G GPUs (rank = host * G + gpu) for small messages: inside a host, LL
packets all pairs (every GPU writes its input as packets into each local peer's scratch and sums
its own input and the peers' packets: no semaphore); across hosts, GPU g swaps that host partial
with GPU g of the other host over a port channel and adds the one it receives.
The published program sends LL packets over the port channel too; cchan writes packets over
memory channels only (PortChannel has no put_packets), so the crossing here is put + signal
behind a handshake: one round trip more than the original."""
from cchan.dsl import AllReduce, Program

VARIANTS = {"allreduce_2node_ll": {}}
RANKS = (2, 4, 8)


def program(nranks):
    G = nranks // 2
    prog = Program("allreduce_2node_ll", AllReduce(nranks), protocol="ll16", max_bytes=1 << 16)
    slot = lambda sender, receiver: sender if sender < receiver else sender - 1  # noqa: E731
    for r in range(nranks):
        host, g = divmod(r, G)
        local = [host * G + (g + k) % G for k in range(1, G)]
        net, scr = prog.port_channel(r, (1 - host) * G + g), prog.scratch(r)
        net.signal(0)  # GPU g of the other host is in this run
        net.wait(0)
        for tb, p in enumerate(local):  # scratch slots 0 .. G-2: packets from the local peers
            prog.memory_channel(r, p).put_packets(prog.scratch(p)[slot(g, p % G)],
                                                  prog.input(r)[0], tb)
        partial = prog.input(r)[0]
        if local:  # slot G-1: this host's partial sum
            partial = scr[G - 1]
            prog.reduce_packets(partial, [prog.input(r)[0]] +
                                [scr[slot(p % G, g)] for p in local], 0)
        net.put(prog.scratch((1 - host) * G + g)[G], partial, 0)  # slot G: the other host's
        net.signal(0)
        net.wait(0)
        prog.reduce(prog.output(r)[0], [partial, scr[G]], 0)
        net.flush(0)
    return prog
