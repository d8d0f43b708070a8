"""Deliberately broken programs, one per class of error the compiler must reject.

Each function returns (program, line) where line is the source line the error must name. The
line numbers are taken from this file at run time (the `at()` helper), so editing this file keeps
them right.
"""
import inspect

from cchan.dsl import AllGather, AllReduce, Program


# The line that the error of a program rejected while it is being built must name (set just
# before the call that fails).
expected = None


def at(offset=1):
    """The line `offset` lines below the caller's line."""
    return inspect.currentframe().f_back.f_lineno + offset


def _allgather(nranks, drop_signal_on=None, handshake=True, signal_first=False):
    prog = Program("broken_allgather", AllGather(nranks))
    lines = {}
    for r in range(nranks):
        for tb, p in enumerate([(r + k) % nranks for k in range(1, nranks)]):
            ch = prog.memory_channel(r, p)
            if handshake:
                ch.signal(tb)
                ch.wait(tb)
            if signal_first:
                ch.signal(tb)
                lines["put"] = at()
                ch.put(prog.output(p)[r], prog.input(r)[0], tb)
            else:
                ch.put(prog.output(p)[r], prog.input(r)[0], tb)
                if (r, p) != drop_signal_on:
                    ch.signal(tb)
            lines["wait"] = at()
            ch.wait(tb)
        prog.copy(prog.output(r)[r], prog.input(r)[0], tb=0)
    return prog, lines


def missing_signal():
    """Rank 0 never signals rank 1 after its put: rank 1's second wait has no signal."""
    prog, lines = _allgather(2, drop_signal_on=(0, 1))
    return prog, lines["wait"]


def race_read_before_signal():
    """The signal goes out before the put, so the peer's wait does not cover the data."""
    prog, lines = _allgather(2, signal_first=True)
    return prog, lines["put"]


def race_no_handshake():
    """Puts into a peer's output before the peer has entered the run."""
    prog = Program("broken_no_handshake", AllGather(2))
    line = None
    for r in range(2):
        p = 1 - r
        ch = prog.memory_channel(r, p)
        line = at() if r == 0 else line
        ch.put(prog.output(p)[r], prog.input(r)[0], 0)
        ch.signal(0)
        ch.wait(0)
        prog.copy(prog.output(r)[r], prog.input(r)[0], tb=0)
    return prog, line


def race_two_writers():
    """Ranks 1 and 2 both put into chunk 0 of rank 0's scratch, nothing orders them."""
    prog = Program("broken_two_writers", AllReduce(3))
    lines = []
    for r in (1, 2):
        ch = prog.memory_channel(r, 0)
        ch.signal(0)
        ch.wait(0)
        lines.append(at())
        ch.put(prog.scratch(0)[0], prog.input(r)[0], 0)
        ch.signal(0)
    for r in (1, 2):
        back = prog.memory_channel(0, r)
        back.signal(r - 1)
        back.wait(r - 1)
        back.wait(r - 1)
    return prog, lines


def deadlock():
    """Both ranks wait for the other before signalling."""
    prog = Program("broken_deadlock", AllReduce(2))
    line = None
    for r in range(2):
        ch = prog.memory_channel(r, 1 - r)
        line = at() if r == 0 else line
        ch.wait(0)
        ch.signal(0)
    return prog, line


def cyclic_waits():
    """One block per rank waits on two channels (index 0 and 1) in an order that forms a cycle:
    rank 0 waits on index 0 before signalling index 1, rank 1 waits on index 1 before
    signalling index 0."""
    prog = Program("broken_cyclic_waits", AllReduce(2))
    a0, a1 = prog.memory_channel(0, 1, 0), prog.memory_channel(0, 1, 1)
    b0, b1 = prog.memory_channel(1, 0, 0), prog.memory_channel(1, 0, 1)
    line = at()
    a0.wait(0)
    a1.signal(0)
    a1.wait(0)
    a0.signal(0)
    b1.wait(0)
    b0.signal(0)
    b0.wait(0)
    b1.signal(0)
    return prog, line


def wrong_postcondition():
    """A 2PA AllReduce that leaves out the last peer's contribution."""
    n = 3
    prog = Program("broken_allreduce", AllReduce(n, chunks=n))
    line = None
    for r in range(n):
        peers = [(r + k) % n for k in range(1, n)]
        chans = {p: prog.memory_channel(r, p) for p in peers}
        for p in peers:
            chans[p].signal(0)
        for p in peers:
            chans[p].wait(0)
        srcs = [prog.input(r)[r]] + [chans[p].remote(prog.input(p)[r]) for p in peers[:-1]]
        if r == 0:
            line = at()
        prog.reduce(prog.output(r)[r], srcs, tb=0)
        for p in peers:
            chans[p].put(prog.output(p)[r], prog.output(r)[r], tb=0)
            chans[p].signal(0)
        for p in peers:
            chans[p].wait(0)
    return prog, line


def chunk_out_of_range():
    prog = Program("broken_range", AllGather(2))
    global expected
    line = expected = at()
    prog.input(0)[1]
    return prog, line


def unknown_peer():
    prog = Program("broken_peer", AllGather(4))
    global expected
    line = expected = at()
    prog.memory_channel(0, 4)
    return prog, line


def unknown_channel():
    """A put over the channel 0 -> 1 whose destination is on rank 2."""
    prog = Program("broken_channel", AllGather(4))
    ch = prog.memory_channel(0, 1)
    global expected
    line = expected = at()
    ch.put(prog.output(2)[0], prog.input(0)[0], 0)
    return prog, line


def port_not_flushed():
    """Port puts whose source is never flushed before the run ends."""
    prog = Program("broken_flush", AllGather(2))
    line = None
    for r in range(2):
        p = 1 - r
        ch = prog.port_channel(r, p)
        ch.signal(0)
        ch.wait(0)
        line = at() if r == 0 else line
        ch.put(prog.output(p)[r], prog.input(r)[0], 0)
        ch.signal(0)
        ch.wait(0)
        prog.copy(prog.output(r)[r], prog.input(r)[0], tb=0)
    return prog, line
