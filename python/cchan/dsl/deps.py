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


def insert_syncs(ir):
    for r in ir.ranks:
        for tb, ops in r.tbs.items():
            out, written, read, prev = [], set(), set(), None
            for op in ops:
                reads, writes = accesses(op)
                conflict_writes = written
                if (prev is not None and op.name == "switch_broadcast"
                        and prev.name == "switch_reduce" and prev.dst[0] == op.src[0]):
                    conflict_writes = written - accesses(prev)[1]
                prev = op
                if (reads & conflict_writes) or (writes & (written | read)):
                    out.append(Op("sync", loop=op.loop, path=op.path, line=op.line))
                    written, read = set(), set()
                out.append(op)
                if op.name in SYNCING:
                    written, read = set(), set()
                else:
                    written |= writes
                    read |= reads
            r.tbs[tb] = out
    return ir
