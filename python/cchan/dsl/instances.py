"""Pass: program instances. Replicates a program k times over chunks cut into k.

Chunk c becomes chunks c*k .. c*k+k-1 and instance i takes c*k+i (so a range of n chunks becomes a
strided ref); thread block t of instance i is t + i*T (T: blocks per rank of the program);
channel index j and semaphore s of instance i are j*k+i and s*k+i: each instance has its own
blocks, queues and semaphores.
"""
import copy

from .errors import ProgramError
from .ir import PlanIR, RankIR, Ref


def _ref(ref, k, i, ch_map):
    return Ref(ref.buf, ref.chunk * k + i, ref.count, ref.stride * k if ref.count > 1 else 1,
               None if ref.ch is None else ch_map[ref.ch])


def replicate(ir, k):
    if k == 1:
        return ir
    ntb = 1 + max((tb for _, tb, _ in ir.blocks()), default=0)
    ranks = []
    for r in ir.ranks:
        nr = RankIR(r.rank, semaphores=r.semaphores * k)
        for ch in r.channels:
            for i in range(k):
                c = copy.deepcopy(ch)
                c.index = ch.index * k + i
                nr.channels.append(c)
        for tb, ops in r.tbs.items():
            for i in range(k):
                ch_map = {j: j * k + i for j in range(len(r.channels))}
                out = nr.tbs.setdefault(tb + i * ntb, [])
                for op in ops:
                    if op.name == "barrier":
                        raise ProgramError("a program with instances > 1 cannot use barrier "
                                           "(each instance would run its own)", op=op,
                                           rank=r.rank, tb=tb)
                    o = copy.copy(op)
                    o.ch = None if op.ch is None else ch_map[op.ch]
                    o.sem = None if op.sem is None else op.sem * k + i
                    o.src = [_ref(x, k, i, ch_map) for x in op.src]
                    o.dst = [_ref(x, k, i, ch_map) for x in op.dst]
                    out.append(o)
        nr.tbs = dict(sorted(nr.tbs.items()))
        ranks.append(nr)
    return PlanIR(ir.name, ir.collective.scaled(k), ir.protocol, ir.inplace, ranks, ir.min_bytes,
                  ir.max_bytes, ir.align, ir.loop_unit)
