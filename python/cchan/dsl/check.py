"""Pass: static checks of a plan's IR, before the simulated schedule.

Chunk ranges, channel and semaphore indices, peers, the channel each operation needs, both ends of
every connection, one thread block per channel end, and that every wait (acquire) has its signal
(release) and the other way round.
"""
from collections import defaultdict

from .errors import (ChannelUseError, ChunkRangeError, MissingSignalError, ProgramError,
                     UnknownChannelError, UnknownPeerError, UnmatchedSignalError)
from .ir import CHANNEL_OPS, SIGNALS, owners, unroll

NEEDS = {  # operation -> channel types it runs on
    "put": ("memory", "port"), "put_signal": ("memory", "port"), "put_signal_flush": ("port",),
    "get": ("memory",), "signal": ("memory", "port"), "wait": ("memory", "port"),
    "flush": ("memory", "port"), "put_packets": ("memory",), "read_packets": ("memory",),
    "reduce_put": ("memory",), "switch_reduce": ("switch",), "switch_broadcast": ("switch",),
}


def _buffer_size(ir, owner, buf):
    c = ir.collective
    if buf == "input":
        return 0 if ir.inplace else c.in_chunks
    if buf == "output":
        return c.out_chunks
    return ir.ranks[owner].scratch_chunks


def _check_channels(ir):
    n = ir.nranks
    for r in ir.ranks:
        for ch in r.channels:
            peers = ch.peers if ch.type == "switch" else [ch.peer]
            for p in peers:
                if p is None or not 0 <= p < n or (ch.type != "switch" and p == r.rank):
                    raise UnknownPeerError(f"rank {r.rank} has a channel to rank {p}, which is "
                                           f"not a peer in this {n}-rank plan ({ch})")
            if ch.type == "switch":
                if r.rank not in ch.peers:
                    raise UnknownPeerError(f"rank {r.rank} builds {ch} without being a member")
                continue
            back = [c for c in ir.ranks[ch.peer].channels
                    if c.type == ch.type and c.peer == r.rank and c.index == ch.index]
            if not back:
                raise UnknownChannelError(f"rank {r.rank} has {ch}, but rank {ch.peer} has no "
                                          f"end of that connection")


def _check_op(ir, rank, tb, op):
    chans = ir.ranks[rank].channels
    if op.name in CHANNEL_OPS:
        if op.ch is None or not 0 <= op.ch < len(chans):
            raise UnknownChannelError(f"channel {op.ch} does not exist on rank {rank} (it has "
                                      f"{len(chans)})", op=op, rank=rank, tb=tb)
        if chans[op.ch].type not in NEEDS[op.name]:
            raise ChannelUseError(f"{op.name} needs a {' or '.join(NEEDS[op.name])} channel, "
                                  f"channel {op.ch} is {chans[op.ch]}", op=op, rank=rank, tb=tb)
    if op.name in ("sem_release", "sem_acquire"):
        if op.sem is None or not 0 <= op.sem < ir.ranks[rank].semaphores:
            raise UnknownChannelError(f"semaphore {op.sem} does not exist on rank {rank}",
                                      op=op, rank=rank, tb=tb)
    if op.name in ("put_packets", "read_packets", "reduce_packets") and op.protocol is None:
        raise ProgramError("packet operation without a protocol", op=op, rank=rank, tb=tb)
    counts = {ref.count for ref in op.src + op.dst}
    if len(counts) > 1:
        raise ProgramError("source and destination chunk counts differ", op=op, rank=rank, tb=tb)
    for ref in op.src + op.dst:
        if ref.ch is not None:
            if not 0 <= ref.ch < len(chans) or chans[ref.ch].type == "switch":
                raise UnknownChannelError(f"{ref} names channel {ref.ch}, which is not a memory "
                                          f"or port channel of rank {rank}", op=op, rank=rank,
                                          tb=tb)
        for o in owners(ir, rank, op, ref):
            size = _buffer_size(ir, o, ref.buf)
            bad = [c for c in ref.chunks() if not 0 <= c < size]
            if bad:
                raise ChunkRangeError(f"{ref} reaches chunk {bad[0]} of {ref.buf} on rank {o}, "
                                      f"which has {size} chunks", op=op, rank=rank, tb=tb)


def _pair_index(ir, rank, ch):
    c = ir.ranks[rank].channels[ch]
    for i, b in enumerate(ir.ranks[c.peer].channels):
        if b.type == c.type and b.peer == rank and b.index == c.index:
            return c.peer, i
    raise AssertionError("unpaired channel passed _check_channels")


def _check_owners(ir):
    """One block drives each channel end's sends, one its waits; one block per semaphore side."""
    seen = {}
    for rank, tb, ops in ir.blocks():
        chans = ir.ranks[rank].channels
        for op in ops:
            role = None
            if op.name in SIGNALS or op.name == "flush" or (
                    op.name == "put" and chans[op.ch].type == "port"):
                role = ("send", op.ch)
            elif op.name == "wait":
                role = ("wait", op.ch)
            elif op.name in ("sem_release", "sem_acquire"):
                role = (op.name, op.sem)
            elif op.name == "barrier":
                role = ("barrier",)
            if role is None:
                continue
            first = seen.setdefault((rank,) + role, tb)
            if first != tb:
                what = "semaphore" if op.name.startswith("sem") else (
                    "barrier" if op.name == "barrier" else f"channel {op.ch}")
                raise ChannelUseError(f"thread blocks {first} and {tb} of rank {rank} both "
                                      f"drive this side of {what}; one block per side",
                                      op=op, rank=rank, tb=tb)


def _check_balance(ir, iters):
    sent, waited = defaultdict(list), defaultdict(list)
    released, acquired = defaultdict(list), defaultdict(list)
    for rank, tb, ops in ir.blocks():
        for op, _ in unroll(ops, iters):
            if op.name in SIGNALS:
                sent[_pair_index(ir, rank, op.ch)].append((op, rank, tb))
            elif op.name == "wait":
                waited[(rank, op.ch)].append((op, rank, tb))
            elif op.name == "sem_release":
                released[(rank, op.sem)].append((op, rank, tb))
            elif op.name == "sem_acquire":
                acquired[(rank, op.sem)].append((op, rank, tb))
    for give, take, noun in ((sent, waited, "signal"), (released, acquired, "release")):
        for key in sorted(set(give) | set(take)):
            g, t = give.get(key, []), take.get(key, [])
            if len(t) > len(g):
                op, rank, tb = t[len(g)]
                src = ""
                if noun == "signal":
                    ch = ir.ranks[rank].channels[op.ch]
                    src = f" from rank {ch.peer} on {ch.type} channel index {ch.index}"
                raise MissingSignalError(
                    f"no {noun}{src} matches this wait ({len(t)} waits, {len(g)} {noun}s per "
                    f"run)", op=op, rank=rank, tb=tb)
            if len(g) > len(t):
                op, rank, tb = g[len(t)]
                raise UnmatchedSignalError(
                    f"no wait consumes this {noun} ({len(g)} {noun}s, {len(t)} waits per run); "
                    f"the next run would start out of step", op=op, rank=rank, tb=tb)


def check(ir, iters=1):
    _check_channels(ir)
    for rank, tb, ops in ir.blocks():
        for op in ops:
            _check_op(ir, rank, tb, op)
    _check_owners(ir)
    _check_balance(ir, iters)
    return ir
