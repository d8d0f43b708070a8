"""AllReduce, two phases, hierarchical (2PH), for 2 hosts x G GPUs: rank = host * G + gpu.

Memory channels inside a host, port channels between the hosts. The data is G chunks; GPU g owns
chunk g on both hosts.
  1. inside each host: GPU g sums chunk g of every local GPU's input, reading the peers' inputs
     directly (zero-copy), into scratch;
  2. across hosts: GPU g sends its partial sum to GPU g of the other host (port channel) and adds
     the one it receives: both hosts now hold the full chunk g;
  3. inside each host: GPU g puts chunk g into every local peer's output.
Only one chunk per GPU crosses the hosts.
"""
from cchan.dsl import AllReduce, Program

VARIANTS = {"allreduce_2ph": {}}
RANKS = (2, 4, 8)


def program(nranks):
    if nranks % 2:
        raise ValueError("2PH needs an even number of ranks (2 hosts x G GPUs)")
    g_count = nranks // 2
    prog = Program("allreduce_2ph", AllReduce(nranks, chunks=g_count), min_bytes=1 << 16)
    tb = 0
    for r in range(nranks):
        host, g = divmod(r, g_count)
        local = [host * g_count + k for k in range(g_count) if k != g]
        other = (1 - host) * g_count + g
        mem = {p: prog.memory_channel(r, p) for p in local}
        net = prog.port_channel(r, other)
        scr = prog.scratch(r)
        # Every peer whose memory this rank touches must be in this run first.
        for p in local:
            mem[p].signal(tb)
        net.signal(tb)
        for p in local:
            mem[p].wait(tb)
        net.wait(tb)
        # 1. reduce-scatter inside the host, zero-copy
        srcs = [prog.input(r)[g]] + [mem[p].remote(prog.input(p)[g]) for p in local]
        prog.reduce(scr[0], srcs, tb)
        # 2. exchange partial sums across hosts
        net.put(prog.scratch(other)[1], scr[0], tb)
        net.signal(tb)
        net.flush(tb)
        net.wait(tb)
        prog.reduce(prog.output(r)[g], [scr[0], scr[1]], tb)
        # 3. all-gather inside the host
        for p in local:
            mem[p].put(prog.output(p)[g], prog.output(r)[g], tb)
            mem[p].signal(tb)
        for p in local:
            mem[p].wait(tb)
    return prog
