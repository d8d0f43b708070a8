"""ReduceScatter over 2 hosts x G GPUs (rank = host * G + gpu): memory channels inside a host,
one port channel to the same GPU of the other host. GPU g sums, zero-copy from its host's inputs,
the chunk its counterpart on the other host owns and sends that partial sum across; then it sums
its own chunk from its host's inputs and the partial that arrived. One chunk per GPU crosses."""
from cchan.dsl import Program, ReduceScatter

VARIANTS = {"reducescatter_2node": {}}
RANKS = (2, 4, 8)


def program(nranks):
    g_count, tb = nranks // 2, 0
    prog = Program("reducescatter_2node", ReduceScatter(nranks))
    for r in range(nranks):
        host, g = divmod(r, g_count)
        local = [host * g_count + k for k in range(g_count) if k != g]
        other = (1 - host) * g_count + g
        mem = {p: prog.memory_channel(r, p) for p in local}
        net, scr = prog.port_channel(r, other), prog.scratch(r)
        for ch in [*mem.values(), net]:  # every peer touched is in this run
            ch.signal(tb)
        for ch in [*mem.values(), net]:
            ch.wait(tb)
        sources = lambda c: [prog.input(r)[c]] + [mem[p].remote(prog.input(p)[c])  # noqa: E731
                                                  for p in local]
        prog.reduce(scr[0], sources(other), tb)
        net.put(prog.scratch(other)[1], scr[0], tb)
        net.signal(tb)
        net.wait(tb)  # the other host's partial of my chunk is in scr[1]
        prog.reduce(prog.output(r)[0], sources(r) + [scr[1]], tb)
        net.flush(tb)
        for ch in mem.values():  # my peers' inputs are read: they may end their run
            ch.signal(tb)
        for ch in mem.values():
            ch.wait(tb)
    return prog
