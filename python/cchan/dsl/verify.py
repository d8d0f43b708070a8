"""Pass: symbolic verification of the collective's postcondition (as MSCCLang does).

Replays the simulated schedule on symbolic values: every chunk slice holds a multiset of input
chunks (a Counter of terms (rank, chunk, slice)), or None when it holds nothing defined. Copies move
values, reductions add them. At the end every output chunk must hold exactly what the collective
requires: each contribution exactly once, nothing else.
"""
from collections import Counter, defaultdict

from .errors import PostconditionError
from .ir import owners


def _add(values):
    total = Counter()
    for v in values:
        if v is None:
            return None
        total.update(v)
    return total


def _show(v):
    if v is None:
        return "nothing defined (never written, or computed from undefined data)"
    if not v:
        return "an empty sum"
    parts = []
    for (q, c, s), n in sorted(v.items()):
        parts.append(f"in{q}[{c}]" + (f"x{n}" if n != 1 else ""))
    return " + ".join(parts)


class Verifier:
    def __init__(self, ir, iters):
        self.ir, self.iters = ir, iters
        self.values = {}
        self.writer = {}
        c = ir.collective
        for q in range(ir.nranks):
            for k in range(c.in_chunks):
                for s in range(iters):
                    v = Counter({c.initial(q, k) + (s,): 1})
                    if ir.inplace and not ir.output_in_input:
                        off = c.inplace_offset(q)
                        if off is not None:
                            self.values[(q, "output", off + k, s)] = v
                    else:  # out of place, or the output is part of the input
                        self.values[(q, "input", k, s)] = v
        self.group_seen = defaultdict(int)

    def _read(self, rank, op, ref, s):
        return [[self.values.get((o, ref.buf, c, s)) for c in ref.chunks()]
                for o in owners(self.ir, rank, op, ref)]

    def _write(self, rank, tb, op, ref, s, vals):
        for o in owners(self.ir, rank, op, ref):
            for c, v in zip(ref.chunks(), vals):
                self.values[(o, ref.buf, c, s)] = v
                self.writer[(o, ref.buf, c, s)] = (op, rank, tb)

    def apply(self, rank, tb, op, slices):
        if not op.dst:
            return
        if op.tbg_size > 1:  # the group's effect lands once, with its last member
            key = (rank, op.group_key(), slices)
            self.group_seen[key] += 1
            if self.group_seen[key] < op.tbg_size:
                return
            del self.group_seen[key]
        for s in slices:
            if op.name == "switch_reduce":
                members = self._read(rank, op, op.src[0], s)
                result = [_add(col) for col in zip(*members)]
            elif op.name in ("reduce", "reduce_put", "reduce_packets"):
                srcs = [self._read(rank, op, ref, s)[0] for ref in op.src]
                result = [_add(col) for col in zip(*srcs)]
            else:
                result = self._read(rank, op, op.src[0], s)[0]
            result = [None if v is None else Counter(v) for v in result]
            for ref in op.dst:
                self._write(rank, tb, op, ref, s, result)

    def check(self):
        ir, c = self.ir, self.ir.collective
        for r in range(ir.nranks):
            for k in range(c.out_chunks):
                want = c.expected(r, k)
                if want is None:
                    continue
                home = (r, "output", k)
                if ir.output_in_input:
                    home = (r, "input", c.inplace_output_offset(r) + k)
                for s in range(self.iters):
                    w = Counter({key + (s,): n for key, n in want.items()})
                    got = self.values.get(home + (s,))
                    if got == w:
                        continue
                    op = rank = tb = None
                    if home + (s,) in self.writer:
                        op, rank, tb = self.writer[home + (s,)]
                    last = "" if op else "; no operation writes it"
                    raise PostconditionError(
                        f"{c.kind}: output chunk {k} of rank {r}"
                        f"{f' (slice {s})' if self.iters > 1 else ''} ends as {_show(got)}, "
                        f"but must be {_show(w)}{last}", op=op, rank=rank, tb=tb)


def verify(ir, trace, iters=1):
    """Checks the postcondition on the schedule from simulate(); raises PostconditionError."""
    actors = [(rank, tb) for rank, tb, _ in ir.blocks()]
    v = Verifier(ir, iters)
    for a, op, slices in trace:
        rank, tb = actors[a]
        v.apply(rank, tb, op, slices)
    v.check()
    return v.values
