"""Collectives: buffer shapes, preconditions and postconditions.

A value is a Counter of terms; a term (q, c) stands for chunk c of rank q's input. Output chunk k of
rank r must hold exactly `expected(r, k)` (each term with the given multiplicity) at the end; None
means any value is accepted (a custom collective's don't-care chunk).
"""
from collections import Counter

from .errors import ProgramError
from .vocabulary import COLLECTIVES

KINDS = COLLECTIVES


class Collective:
    kind = None

    def __init__(self, nranks, chunks=1, root=None):
        if nranks < 1:
            raise ProgramError(f"nranks must be at least 1, not {nranks}")
        self.nranks = nranks
        self.chunks = chunks  # chunks per unit (see in_chunks/out_chunks)
        self.root = root

    # Chunk counts of one rank's input and output buffer.
    @property
    def in_chunks(self):
        return self.chunks

    @property
    def out_chunks(self):
        return self.chunks

    def scaled(self, k):
        """The same collective with every chunk cut into k (program instances)."""
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        c.chunks = self.chunks * k
        return c

    def initial(self, rank, chunk):
        """The term that input chunk `chunk` of `rank` starts with."""
        return (rank, chunk)

    def inplace_offset(self, rank):
        """Where the input starts in the output (in chunks) for in-place calls, or None."""
        return None

    def inplace_output_offset(self, rank):
        """Where the output starts in the input (in chunks) for in-place calls whose output is
        part of the input (ReduceScatter, NCCL's convention), or None."""
        return None

    def expected(self, rank, chunk):
        raise NotImplementedError

    def describe(self):
        return self.kind


class AllReduce(Collective):
    kind = "allreduce"

    def inplace_offset(self, rank):
        return 0

    def expected(self, rank, chunk):
        return Counter({(q, chunk): 1 for q in range(self.nranks)})


class AllGather(Collective):
    kind = "allgather"

    @property
    def out_chunks(self):
        return self.chunks * self.nranks

    def inplace_offset(self, rank):
        return rank * self.chunks

    def expected(self, rank, chunk):
        return Counter({(chunk // self.chunks, chunk % self.chunks): 1})


class ReduceScatter(Collective):
    kind = "reducescatter"

    @property
    def in_chunks(self):
        return self.chunks * self.nranks

    def inplace_output_offset(self, rank):
        return rank * self.chunks

    def expected(self, rank, chunk):
        return Counter({(q, rank * self.chunks + chunk): 1 for q in range(self.nranks)})


class AllToAll(Collective):
    kind = "alltoall"

    @property
    def in_chunks(self):
        return self.chunks * self.nranks

    @property
    def out_chunks(self):
        return self.chunks * self.nranks

    def inplace_offset(self, rank):
        return 0  # in place, the input is the output (a chunk is overwritten once it was sent)

    def expected(self, rank, chunk):
        src, c = divmod(chunk, self.chunks)
        return Counter({(src, rank * self.chunks + c): 1})


class Broadcast(Collective):
    kind = "broadcast"

    def __init__(self, nranks, chunks=1, root=0):
        super().__init__(nranks, chunks, root)
        if not 0 <= root < nranks:
            raise ProgramError(f"broadcast root {root} is not a rank of {nranks}")

    def inplace_offset(self, rank):
        return 0 if rank == self.root else None

    def expected(self, rank, chunk):
        return Counter({(self.root, chunk): 1})


class Custom(Collective):
    """A user's collective: `post(rank, chunk)` gives the terms output chunk `chunk` of `rank`
    must hold, as a dict {(q, c): multiplicity} with (q, c) = input chunk c of rank q, or None
    for a chunk whose final value does not matter. `pre(rank, chunk)` (optional) names the term
    an input chunk starts with."""
    kind = "custom"

    def __init__(self, nranks, input_chunks, output_chunks, post, pre=None):
        super().__init__(nranks, 1)
        self._in, self._out, self._post, self._pre = input_chunks, output_chunks, post, pre

    @property
    def in_chunks(self):
        return self._in * self.chunks

    @property
    def out_chunks(self):
        return self._out * self.chunks

    def initial(self, rank, chunk):
        return self._pre(rank, chunk) if self._pre else (rank, chunk)

    def expected(self, rank, chunk):
        if self._post is None:
            return None
        k = self.chunks
        want = self._post(rank, chunk // k)
        if want is None:
            return None
        # Program instances cut chunks into k: chunk j of instance i is chunk j*k+i.
        return Counter({(q, c * k + chunk % k): n for (q, c), n in want.items()})


def post_table(c):
    """A custom collective's postcondition as the plan keeps it: per rank, per output chunk,
    null (any value) or the sorted [rank, chunk, multiplicity] terms it must hold."""
    rows = []
    for r in range(c.nranks):
        row = []
        for k in range(c.out_chunks):
            want = c.expected(r, k)
            row.append(None if want is None else
                       [[q, ch, n] for (q, ch), n in sorted(want.items())])
        rows.append(row)
    return rows


def pre_table(c):
    """Per rank, per input chunk: the [rank, chunk] term it starts with (custom `pre`)."""
    return [[list(c.initial(r, k)) for k in range(c.in_chunks)] for r in range(c.nranks)]


def from_plan(kind, nranks, in_chunks, out_chunks, root=None, post=None, pre=None):
    """The collective a plan document names, with its chunk counts (and, for custom ones, the
    postcondition and precondition tables the plan keeps)."""
    if kind == "allreduce":
        return AllReduce(nranks, in_chunks)
    if kind == "allgather":
        return AllGather(nranks, in_chunks)
    if kind == "reducescatter":
        return ReduceScatter(nranks, in_chunks // max(nranks, 1))
    if kind == "alltoall":
        return AllToAll(nranks, in_chunks // max(nranks, 1))
    if kind == "broadcast":
        return Broadcast(nranks, in_chunks, root or 0)

    def post_fn(rank, chunk):
        terms = post[rank][chunk]
        return None if terms is None else {(q, c): n for q, c, n in terms}

    def pre_fn(rank, chunk):
        return tuple(pre[rank][chunk])

    return Custom(nranks, in_chunks, out_chunks, post_fn if post is not None else None,
                  pre_fn if pre is not None else None)
