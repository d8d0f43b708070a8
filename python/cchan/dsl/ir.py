"""The compiler's intermediate form: what a plan holds, as Python objects.

The DSL front end builds it, the passes rewrite it, lower.py turns it into the plan document and
back. Loops are kept as a loop id on each operation (None outside loops) instead of `loop` markers.
"""
from dataclasses import dataclass, field
import os

from .vocabulary import BUFFERS, OP_NAMES, channel_needs, ops_where  # noqa: F401 (re-exported)

# Operations by what they do (vocabulary.json); the simulator, dependence analysis and fusion
# share these sets.
SENDS = ops_where("send")
SIGNALS = ops_where("signal")
PACKET_READS = ops_where("packets", "read")
PACKET_OPS = PACKET_READS | ops_where("packets", "write")
DATA_OPS = ops_where("data")
# Operations that contain a block-wide synchronization after their data part (see plan-format.md).
SYNCING = ops_where("syncs")
CHANNEL_NEEDS = channel_needs()  # op -> the channel types it runs on
CHANNEL_OPS = frozenset(CHANNEL_NEEDS)


@dataclass
class Ref:
    """`count` chunks from `chunk`, `stride` apart; with `ch`: the peer's, via channel `ch`."""
    buf: str
    chunk: int
    count: int = 1
    stride: int = 1
    ch: int | None = None

    def chunks(self):
        return [self.chunk + j * self.stride for j in range(self.count)]

    def to_json(self):
        d = {"buf": self.buf, "chunk": self.chunk, "count": self.count}
        if self.stride != 1 and self.count > 1:
            d["stride"] = self.stride
        if self.ch is not None:
            d["ch"] = self.ch
        return d

    @staticmethod
    def from_json(d):
        return Ref(d["buf"], d["chunk"], d["count"], d.get("stride", 1), d.get("ch"))

    def __str__(self):
        where = f"peer(ch{self.ch})." if self.ch is not None else ""
        if self.count == 1:
            rng = f"{self.chunk}"
        elif self.stride == 1:
            rng = f"{self.chunk}:{self.chunk + self.count}"
        else:
            rng = f"{self.chunk}:{self.chunk + self.count * self.stride}:{self.stride}"
        return f"{where}{self.buf}[{rng}]"


@dataclass
class Op:
    name: str
    ch: int | None = None
    sem: int | None = None
    src: list = field(default_factory=list)
    dst: list = field(default_factory=list)
    protocol: str | None = None
    tbg_index: int = 0
    tbg_size: int = 1
    loop: int | None = None  # loop id (IR only)
    path: str | None = None  # the user's file (IR only; plans keep the base name in loc)
    line: int | None = None
    # the user's calls that led there, innermost first ((path, line) pairs; errors only)
    via: tuple = field(default=(), compare=False)

    def loc(self):
        if self.path is None:
            return None
        return f"{os.path.basename(self.path)}:{self.line}"

    def path_line(self):
        return None if self.path is None else f"{self.path}:{self.line}"

    def via_text(self):
        """The user's calls that led to the operation, when it was made in a helper function."""
        return "" if not self.via else " (called from " + ", ".join(
            f"{p}:{ln}" for p, ln in self.via) + ")"

    def to_json(self):
        d = {"op": self.name}
        if self.ch is not None:
            d["ch"] = self.ch
        if self.sem is not None:
            d["sem"] = self.sem
        if self.src:
            d["src"] = [r.to_json() for r in self.src]
        if self.dst:
            d["dst"] = [r.to_json() for r in self.dst]
        if self.protocol is not None:
            d["protocol"] = self.protocol
        if self.tbg_size > 1:
            d["tbg_index"] = self.tbg_index
            d["tbg_size"] = self.tbg_size
        if self.path is not None:
            d["loc"] = self.loc()
        return d

    @staticmethod
    def from_json(d, loop=None):
        path = line = None
        if "loc" in d:
            path, _, ln = d["loc"].rpartition(":")
            line = int(ln) if ln.isdigit() else None
        return Op(d["op"], d.get("ch"), d.get("sem"), [Ref.from_json(r) for r in d.get("src", [])],
                  [Ref.from_json(r) for r in d.get("dst", [])], d.get("protocol"),
                  d.get("tbg_index", 0), d.get("tbg_size", 1), loop, path, line)

    def group_key(self):
        """Members of one thread-block-group operation share this key."""
        return (self.name, self.ch, tuple(map(str, self.src)), tuple(map(str, self.dst)),
                self.tbg_size, self.path, self.line)

    def __str__(self):
        parts = [self.name]
        if self.ch is not None:
            parts.append(f"ch{self.ch}")
        if self.sem is not None:
            parts.append(f"sem{self.sem}")
        if self.dst:
            parts.append(", ".join(map(str, self.dst)))
            if self.src:
                parts.append("<-")
        if self.src:
            parts.append(" + ".join(map(str, self.src)) if self.name in (
                "reduce", "reduce_put", "reduce_packets") else ", ".join(map(str, self.src)))
        if self.protocol:
            parts.append(f"[{self.protocol}]")
        if self.tbg_size > 1:
            parts.append(f"(group part {self.tbg_index}/{self.tbg_size})")
        return " ".join(parts)


@dataclass
class Channel:
    type: str
    index: int = 0
    peer: int | None = None
    peers: list | None = None
    buffer: str | None = None
    remote_buffers: set = field(default_factory=set)

    def key(self):
        if self.type == "switch":
            return ("switch", tuple(self.peers), self.index)
        return (self.type, self.peer, self.index)

    def to_json(self):
        d = {"type": self.type}
        if self.type == "switch":
            d["peers"] = list(self.peers)
            d["index"] = self.index
            d["buffer"] = self.buffer
        else:
            d["peer"] = self.peer
            d["index"] = self.index
            d["remote_buffers"] = sorted(self.remote_buffers, key=BUFFERS.index)
        return d

    @staticmethod
    def from_json(d):
        return Channel(d["type"], d["index"], d.get("peer"), d.get("peers"), d.get("buffer"),
                       set(d.get("remote_buffers", [])))

    def __str__(self):
        if self.type == "switch":
            return f"switch#{self.index} over ranks {self.peers} ({self.buffer})"
        return f"{self.type}#{self.index} to rank {self.peer}"


@dataclass
class RankIR:
    rank: int
    channels: list = field(default_factory=list)
    semaphores: int = 0
    scratch_chunks: int = 0
    tbs: dict = field(default_factory=dict)  # tb id -> [Op]


@dataclass
class PlanIR:
    name: str
    collective: object  # collectives.Collective
    protocol: str
    inplace: bool
    ranks: list
    min_bytes: int = 0
    max_bytes: int = 0
    align: int = 16
    loop_unit: int = 0

    @property
    def nranks(self):
        return len(self.ranks)

    @property
    def output_in_input(self):
        """An in-place plan whose output is part of its input (ReduceScatter): it names no
        output."""
        return self.inplace and self.collective.inplace_output_offset(0) is not None

    def blocks(self):
        """(rank, tb, ops) for every thread block, in rank and tb order."""
        for r in self.ranks:
            for tb in sorted(r.tbs):
                yield r.rank, tb, r.tbs[tb]

    def uses_packets(self):
        return any(op.name in PACKET_OPS
                   for _, _, ops in self.blocks() for op in ops)


def has_loops(ir):
    return any(op.loop is not None for _, _, ops in ir.blocks() for op in ops)


def unroll(ops, iters):
    """The operations a block runs, with loops unrolled `iters` times: (op, slices) pairs, where
    slices are the slices of each chunk the op touches (all of them outside loops)."""
    every = tuple(range(iters))
    out, i = [], 0
    while i < len(ops):
        if ops[i].loop is None:
            out.append((ops[i], every))
            i += 1
            continue
        j = i
        while j < len(ops) and ops[j].loop == ops[i].loop:
            j += 1
        for it in range(iters):
            out.extend((op, (it,)) for op in ops[i:j])
        i = j
    return out


def owners(ir, rank, op, ref):
    """The ranks whose memory `ref` of `op` (run on `rank`) names."""
    chans = ir.ranks[rank].channels
    if ref.ch is not None:
        return [chans[ref.ch].peer]
    if (op.name == "switch_reduce" and ref is op.src[0]) or \
            (op.name == "switch_broadcast" and ref is op.dst[0]):
        return list(chans[op.ch].peers)
    return [rank]
