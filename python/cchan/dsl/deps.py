"""Pass: chunk-level data dependences within each thread block.

Operations of a block are cooperative: its threads split the data, so an operation that reads what
an earlier one wrote (or overwrites what it read or wrote) must wait for all threads of the block:
a `sync`. Walking the block's list, we keep the chunks written and read since the last block-wide
synchronization; an access that conflicts with them gets a `sync` before it. Operations that
synchronize the block themselves (signal, wait, semaphores, barrier, sync) clear the sets, so no
sync is inserted next to them and none twice in a row.

One exception, from cchan/switch_channel.h: a switch_broadcast of exactly the range that the
switch_reduce just before it produced needs no sync (each thread broadcasts only elements it
reduced itself).
"""
from .errors import RaceError
from .ir import SYNCING, Op


def _slots(ref):
    return {(ref.ch, ref.buf, c) for c in ref.chunks()}


def accesses(op):
    """(chunks read, chunks written) by op, as (channel or None, buffer, chunk) triples."""
    reads, writes = set(), set()
    for r in op.src:
        reads |= _slots(r)
    for r in op.dst:
        writes |= _slots(r)
    if op.name in ("switch_reduce", "switch_broadcast"):
        # The symmetric buffer is every member's: keep it apart from plain local chunks.
        if op.name == "switch_reduce":
            reads = {("switch", b, c) for _, b, c in reads}
        else:
            writes = {("switch", b, c) for _, b, c in writes}
    return reads, writes


def _conflicts(ops):
    """For each op of a block, in order: (op, the earlier op it conflicts with since the last
    block-wide synchronization, or None)."""
    written, read, prev = {}, {}, None  # chunk -> the op that wrote / read it
    for op in ops:
        if op.name == "sync":
            written, read, prev = {}, {}, op
            yield op, None
            continue
        reads, writes = accesses(op)
        conflict_writes = dict(written)
        if (prev is not None and op.name == "switch_broadcast"
                and prev.name == "switch_reduce" and prev.dst[0] == op.src[0]):
            for c in accesses(prev)[1]:
                conflict_writes.pop(c, None)
        prev = op
        hit = next((conflict_writes[c] for c in sorted(reads & conflict_writes.keys(), key=str)),
                   None) or next((written.get(c) or read.get(c) for c in sorted(
                       writes & (written.keys() | read.keys()), key=str)), None)
        yield op, hit
        if hit is not None:
            written, read = {}, {}
        if op.name in SYNCING:
            written, read = {}, {}
        else:
            written.update((c, op) for c in writes)
            read.update((c, op) for c in reads)


def insert_syncs(ir):
    for r in ir.ranks:
        for tb, ops in r.tbs.items():
            out = []
            for op, hit in _conflicts(ops):
                if hit is not None:
                    out.append(Op("sync", loop=op.loop, path=op.path, line=op.line, via=op.via))
                out.append(op)
            r.tbs[tb] = out
    return ir


def check_syncs(ir):
    """The obligations insert_syncs meets, on a plan it may not have compiled: every op that
    reads what an earlier op of its block wrote, or overwrites what it read or wrote, has a
    block-wide synchronization between them."""
    for r in ir.ranks:
        for tb, ops in r.tbs.items():
            for op, hit in _conflicts(ops):
                if hit is not None:
                    raise RaceError(
                        f"touches chunks that {hit.name} ({hit.path_line() or '?'}) of the same "
                        f"thread block accessed, with no block-wide synchronization between "
                        f"them: the block's threads split the data, so some thread may get "
                        f"here first (a sync is missing)", op=op, rank=r.rank, tb=tb)
    return ir
