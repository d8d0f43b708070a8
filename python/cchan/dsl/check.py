"""Pass: static checks of a plan's IR, before the simulated schedule.

Chunk ranges, channel and semaphore indices, peers, the channel each operation needs, both ends of
every connection, one thread block per channel end, and that every wait (acquire) has its signal
(release) and the other way round.
"""
from collections import defaultdict

from .errors import (ChannelUseError, ChunkRangeError, ExecutorLimitError, InputWriteError,
                     MissingSignalError, ProgramError, UnknownChannelError, UnknownPeerError,
                     UnmatchedSignalError)
from .ir import CHANNEL_NEEDS, CHANNEL_OPS, SIGNALS, owners
from .vocabulary import LIMITS, OPS

NEEDS = CHANNEL_NEEDS


def _buffer_size(ir, owner, buf):
    c = ir.collective
    if buf == "input":
        return 0 if ir.inplace and not ir.output_in_input else c.in_chunks
    if buf == "output":
        return 0 if ir.output_in_input else c.out_chunks
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
    shape = OPS[op.name]
    for what, refs in (("src", op.src), ("dst", op.dst)):
        lo, hi = shape.get(what, (0, 0))
        if not lo <= len(refs) <= hi:
            raise ProgramError(f"{len(refs)} {what} refs; {op.name} takes {lo} to {hi}",
                               op=op, rank=rank, tb=tb)
    for ref in op.dst:
        if ref.buf != "input":
            continue
        if ir.output_in_input:
            # an in-place ReduceScatter's output is the owner's slice of its input
            owner = rank if ref.ch is None else \
                chans[ref.ch].peer if 0 <= ref.ch < len(chans) else None
            if owner is not None:
                lo = ir.collective.inplace_output_offset(owner)
                hi = lo + ir.collective.out_chunks
                if all(lo <= k < hi for k in ref.chunks()):
                    continue
                raise InputWriteError(
                    f"writes {ref} of rank {owner}: an in-place {ir.collective.kind} may write "
                    f"only the output inside its input, chunks [{lo}, {hi})", op=op, rank=rank,
                    tb=tb)
        raise InputWriteError(
            f"writes {ref}: the caller's input is read-only (its send buffer; an in-place "
            f"plan writes the output, which holds the input)", op=op, rank=rank, tb=tb)
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


def _counts(pair):
    out, inl = pair
    return f"{len(out)} (+{len(inl)} per loop iteration)" if inl else f"{len(out)}"


def _check_balance(ir):
    """Signals against waits and releases against acquires, outside and inside loops apart: a
    run makes `outside + iters x inside` of each, so they match at every iteration count only
    when both parts match (what the executor's loader requires too)."""
    sent, waited = defaultdict(lambda: ([], [])), defaultdict(lambda: ([], []))
    released, acquired = defaultdict(lambda: ([], [])), defaultdict(lambda: ([], []))
    barriers = {r.rank: ([], []) for r in ir.ranks}
    for rank, tb, ops in ir.blocks():
        for op in ops:
            part = 0 if op.loop is None else 1
            if op.name in SIGNALS:
                sent[_pair_index(ir, rank, op.ch)][part].append((op, rank, tb))
            elif op.name == "wait":
                waited[(rank, op.ch)][part].append((op, rank, tb))
            elif op.name == "sem_release":
                released[(rank, op.sem)][part].append((op, rank, tb))
            elif op.name == "sem_acquire":
                acquired[(rank, op.sem)][part].append((op, rank, tb))
            elif op.name == "barrier":
                barriers[rank][part].append((op, rank, tb))
    for give, take, noun in ((sent, waited, "signal"), (released, acquired, "release")):
        for key in sorted(set(give) | set(take)):
            g, t = give[key], take[key]
            (g0, g1), (t0, t1) = map(len, g), map(len, t)
            if (g0, g1) == (t0, t1):
                continue
            # waits outnumber signals at some iteration count >= 1: a wait never returns
            if t1 > g1 or t0 + t1 > g0 + g1:
                op, rank, tb = t[1][g1] if t1 > g1 else t[0][g0]
                src = ""
                if noun == "signal":
                    ch = ir.ranks[rank].channels[op.ch]
                    src = f" from rank {ch.peer} on {ch.type} channel index {ch.index}"
                raise MissingSignalError(
                    f"no {noun}{src} matches this wait ({_counts(t)} waits, {_counts(g)} "
                    f"{noun}s per run)", op=op, rank=rank, tb=tb)
            op, rank, tb = g[1][t1] if g1 > t1 else g[0][t0]
            raise UnmatchedSignalError(
                f"no wait consumes this {noun} ({_counts(g)} {noun}s, {_counts(t)} waits per "
                f"run); the next run would start out of step", op=op, rank=rank, tb=tb)
    first = ir.ranks[0].rank if ir.ranks else None
    for rank, b in barriers.items():
        ref = barriers[first]
        if tuple(map(len, b)) != tuple(map(len, ref)):
            op, orank, tb = (b[0] + b[1] + ref[0] + ref[1])[0]
            raise ProgramError(f"rank {rank} runs {_counts(b)} barriers, rank {first} "
                               f"{_counts(ref)}: every rank runs the same barriers",
                               op=op, rank=orank, tb=tb)


def _limit(key, value, what, op=None, rank=None, tb=None):
    if value > LIMITS[key]:
        raise ExecutorLimitError(f"{what}: {value}, the executor takes at most {LIMITS[key]} "
                                 f"(vocabulary.json limits.{key})", op=op, rank=rank, tb=tb)


def _check_limits(ir):
    """What the executor's loader would refuse, so that a plan that compiles also loads."""
    _limit("max_ranks", ir.nranks, "ranks")
    c = ir.collective
    for name, n in (("input", _buffer_size(ir, 0, "input")),
                    ("output", _buffer_size(ir, 0, "output")),
                    ("scratch", max((r.scratch_chunks for r in ir.ranks), default=0))):
        _limit("max_chunks", n, f"chunks of {name}")
    m = LIMITS["align_multiple"]
    if ir.align < m or ir.align % m:
        raise ExecutorLimitError(f"align: {ir.align}, the executor needs a multiple of {m}")
    if ir.loop_unit % ir.align:
        raise ExecutorLimitError(f"loop_unit: {ir.loop_unit} is not a multiple of align "
                                 f"{ir.align}")
    if ir.max_bytes and ir.max_bytes < ir.min_bytes:
        raise ProgramError(f"max_bytes {ir.max_bytes} is below min_bytes {ir.min_bytes}")
    for r in ir.ranks:
        _limit("max_channels", len(r.channels), f"channels of rank {r.rank}")
        for ch in r.channels:
            _limit("max_channel_index", ch.index, f"index of rank {r.rank}'s {ch}")
        _limit("max_semaphores", r.semaphores, f"semaphores of rank {r.rank}")
        _limit("max_blocks", 1 + max(r.tbs, default=-1), f"thread blocks of rank {r.rank}")
        nops = 0
        for tb, ops in r.tbs.items():
            loop = None
            for op in ops:
                nops += 1 + (op.loop is not None and op.loop != loop)  # and its loop marker
                loop = op.loop
                _limit("max_blocks", op.tbg_size, "thread-block group size", op, r.rank, tb)
                if op.name in ("reduce", "reduce_put", "reduce_packets"):
                    _limit("max_srcs", len(op.src), f"sources of {op.name}", op, r.rank, tb)
        _limit("max_ops", nops, f"operations of rank {r.rank} (loop markers and syncs "
                                f"included)")


def check(ir):
    _check_channels(ir)
    _check_limits(ir)
    for rank, tb, ops in ir.blocks():
        for op in ops:
            _check_op(ir, rank, tb, op)
    _check_owners(ir)
    _check_balance(ir)
    return ir
