"""The DSL front end: a program over all ranks, built by calling operations on channels and chunks.

Every call records the user's file and line, so that every later error can point at it.
"""
import contextlib
import copy
import inspect
import os

from . import collectives
from .errors import ChunkRangeError, ProgramError, UnknownChannelError, UnknownPeerError
from .ir import Channel, Op, PlanIR, RankIR, Ref
from .vocabulary import PACKET_PROTOCOLS, PROTOCOLS

_HERE = os.path.dirname(os.path.abspath(__file__))


_STDLIB = os.path.dirname(os.path.abspath(os.__file__))
_VIA_MAX = 3  # outer calls an error names


def _caller():
    """The first stack frame outside the DSL's own modules (the user's call), and the user's
    calls that led to it, innermost first: frames up to the DSL's own or the standard library's
    (the command line, a test runner), at most _VIA_MAX of them."""
    f = inspect.currentframe()
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if os.path.dirname(path) != _HERE:
            break
        f = f.f_back
    if f is None:
        return None, None, ()
    site, via = (path, f.f_lineno), []
    f = f.f_back
    while f is not None and len(via) < _VIA_MAX:
        p = os.path.abspath(f.f_code.co_filename)
        if os.path.dirname(p) == _HERE or p.startswith(_STDLIB + os.sep) or p.startswith("<"):
            break
        via.append((p, f.f_lineno))
        f = f.f_back
    return site[0], site[1], tuple(via)


def _site(what):
    path, line, via = _caller()
    return Op(what, path=path, line=line, via=via)


class TBGroup:
    """Thread blocks that run one operation together, each on its share of the data."""

    def __init__(self, tbs):
        self.tbs = list(tbs)
        if not self.tbs or len(set(self.tbs)) != len(self.tbs) or min(self.tbs) < 0:
            raise ProgramError(f"a thread-block group needs distinct block ids, not {tbs}",
                               op=_site("TBGroup"))


class Chunk:
    """`count` chunks from `index` of buffer `buf` of `rank`."""

    def __init__(self, rank, buf, index, count):
        self.rank, self.buf, self.index, self.count = rank, buf, index, count

    def ref(self, ch=None):
        return Ref(self.buf, self.index, self.count, 1, ch)

    def __repr__(self):
        return f"rank{self.rank}.{self.buf}[{self.index}:{self.index + self.count}]"


class Buffer:
    """A rank's buffer, indexed by chunk: buf[i] or buf[i:j]. An in-place input is a view onto
    the output (`target`, `offset`), an in-place ReduceScatter's output one onto the input."""

    def __init__(self, rank, name, size, target=None, offset=0):
        self.rank, self.name, self.size = rank, name, size
        self.target, self.offset = target or name, offset

    def __len__(self):
        if self.size is None:
            raise ProgramError("scratch buffers have no fixed length", op=_site(self.name))
        return self.size

    def __getitem__(self, key):
        if isinstance(key, slice):
            if key.step not in (None, 1):
                raise ChunkRangeError(f"{self.name}[{key}]: chunk slices take no step",
                                      op=_site(f"{self.name}[]"), rank=self.rank)
            start = 0 if key.start is None else key.start
            stop = self.size if key.stop is None else key.stop
            if stop is None:
                raise ChunkRangeError("scratch slices need an end", op=_site("scratch[]"),
                                      rank=self.rank)
            count = stop - start
        else:
            start, count = key, 1
        if start < 0 or count < 1 or (self.size is not None and start + count > self.size):
            limit = "" if self.size is None else f" (it has {self.size} chunks)"
            raise ChunkRangeError(
                f"chunks [{start}, {start + count}) are outside {self.name} of rank "
                f"{self.rank}{limit}", op=_site(f"{self.name}[]"), rank=self.rank)
        return Chunk(self.rank, self.target, self.offset + start, count)


class RankView:
    def __init__(self, input, output, scratch):
        self.input, self.output, self.scratch = input, output, scratch


class _ChannelBase:
    def __init__(self, prog, kind, src, dst, index):
        self.prog, self.kind, self.src, self.dst, self.index = prog, kind, src, dst, index

    def _ch(self):
        return self.prog._chan_index(self.src, (self.kind, self.dst, self.index))

    def _local(self, chunk, what):
        if chunk.rank != self.src:
            raise UnknownChannelError(
                f"{what} {chunk} is on rank {chunk.rank}, but this {self.kind} channel runs on "
                f"rank {self.src} (to rank {self.dst})", op=_site(what), rank=self.src)
        return chunk.ref()

    def _remote(self, chunk, what):
        if chunk.rank != self.dst:
            raise UnknownChannelError(
                f"{what} {chunk} is on rank {chunk.rank}, but this {self.kind} channel connects "
                f"rank {self.src} to rank {self.dst}", op=_site(what), rank=self.src)
        self.prog._ranks[self.src].channels[self._ch()].remote_buffers.add(chunk.buf)
        return chunk.ref(self._ch())

    @staticmethod
    def _same_size(a, b, what):
        if a.count != b.count:
            raise ProgramError(f"{what}: source and destination differ in size ({a.count} and "
                               f"{b.count} chunks)", op=_site(what), rank=a.rank)

    def put(self, dst, src, tb):
        """Copies local `src` into the peer's `dst` (memory: now; port: asynchronously)."""
        self._same_size(dst, src, "put")
        self.prog._emit(self.src, tb, "put", ch=self._ch(), src=[self._local(src, "put source")],
                        dst=[self._remote(dst, "put destination")])

    def signal(self, tb):
        self.prog._emit(self.src, tb, "signal", ch=self._ch())

    def wait(self, tb):
        self.prog._emit(self.src, tb, "wait", ch=self._ch())

    def flush(self, tb):
        self.prog._emit(self.src, tb, "flush", ch=self._ch())


class PortChannel(_ChannelBase):
    """Rank `src`'s end of a port channel to `dst`: puts by DMA/RDMA through the proxy."""


class MemoryChannel(_ChannelBase):
    """Rank `src`'s end of a memory channel to `dst`: the GPU's own loads and stores."""

    def get(self, dst, src, tb):
        """Copies the peer's `src` into local `dst`."""
        self._same_size(dst, src, "get")
        self.prog._emit(self.src, tb, "get", ch=self._ch(), src=[self._remote(src, "get source")],
                        dst=[self._local(dst, "get destination")])

    def remote(self, chunk):
        """The peer's chunk, as a source of reduce() read through this channel."""
        return _RemoteChunk(self, self._remote(chunk, "remote source"), chunk)

    def put_packets(self, dst, src, tb, protocol=None):
        """Local `src` as LL packets into the peer's scratch `dst`."""
        self._same_size(dst, src, "put_packets")
        if dst.buf != "scratch":
            raise ProgramError("LL packets go to a scratch buffer", op=_site("put_packets"),
                               rank=self.src)
        self.prog._emit(self.src, tb, "put_packets", ch=self._ch(),
                        src=[self._local(src, "put_packets source")],
                        dst=[self._remote(dst, "put_packets destination")],
                        protocol=self.prog._ll(protocol))

    def read_packets(self, dst, src, tb, protocol=None):
        """Waits for the packets the peer put into local scratch `src`; payload into `dst`."""
        self._same_size(dst, src, "read_packets")
        self.prog._emit(self.src, tb, "read_packets", ch=self._ch(),
                        src=[self._local(src, "read_packets source")],
                        dst=[self._local(dst, "read_packets destination")],
                        protocol=self.prog._ll(protocol))

    def reduce_put(self, dst, srcs, tb):
        """The sum of `srcs` written into the peer's `dst` (no local copy of the sum)."""
        refs = self.prog._sources(self.src, srcs, dst.count, "reduce_put")
        self.prog._emit(self.src, tb, "reduce_put", ch=self._ch(), src=refs,
                        dst=[self._remote(dst, "reduce_put destination")])


class _RemoteChunk:
    def __init__(self, channel, ref, chunk):
        self.channel, self.ref_, self.chunk = channel, ref, chunk
        self.rank, self.count = channel.src, chunk.count


class SwitchChannel:
    """A switch channel over `ranks`, on their symmetric buffer `buffer`."""

    def __init__(self, prog, ranks, buffer, index):
        self.prog, self.ranks, self.buffer, self.index = prog, list(ranks), buffer, index

    def _ch(self, rank, what):
        if rank not in self.ranks:
            raise UnknownChannelError(f"rank {rank} is not a member of this switch channel "
                                      f"(members {self.ranks})", op=_site(what), rank=rank)
        return self.prog._chan_index(rank, ("switch", tuple(self.ranks), self.index))

    def reduce(self, dst, index, tb):
        """Local `dst` = sum over members of chunks [index, index + dst.count) of the buffer."""
        ch = self._ch(dst.rank, "switch_reduce")
        self.prog._emit(dst.rank, tb, "switch_reduce", ch=ch,
                        src=[Ref(self.buffer, index, dst.count)], dst=[dst.ref()])

    def broadcast(self, index, src, tb):
        """Local `src` into chunks [index, index + src.count) of the buffer on every member."""
        ch = self._ch(src.rank, "switch_broadcast")
        self.prog._emit(src.rank, tb, "switch_broadcast", ch=ch, src=[src.ref()],
                        dst=[Ref(self.buffer, index, src.count)])


class Semaphore:
    """A rank-local semaphore: one thread block releases, another acquires."""

    def __init__(self, prog, rank, index):
        self.prog, self.rank, self.index = prog, rank, index

    def release(self, tb):
        self.prog._emit(self.rank, tb, "sem_release", sem=self.index)

    def acquire(self, tb):
        self.prog._emit(self.rank, tb, "sem_acquire", sem=self.index)


class Program:
    """A collective algorithm over `collective.nranks` ranks.

    protocol: "simple" (put/get + semaphores) or "ll8"/"ll16" (the default of packet operations).
    inplace: the input is part of the output (plan-format.md, Buffers).
    instances: replicate the program k times over chunks cut into k, on k times the thread blocks,
    channels and semaphores. loop_unit: bytes per iteration of `with prog.loop():` bodies.
    min_bytes/max_bytes: the message sizes the plan is meant for.
    """

    def __init__(self, name, collective, protocol="simple", inplace=False, instances=1,
                 min_bytes=0, max_bytes=0, loop_unit=0, align=16):
        if protocol not in PROTOCOLS:
            raise ProgramError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}",
                               op=_site("Program"))
        if instances < 1:
            raise ProgramError("instances must be at least 1", op=_site("Program"))
        if inplace and collective.inplace_offset(0) is None and \
                collective.inplace_output_offset(0) is None and collective.kind != "broadcast":
            raise ProgramError(f"{collective.kind} has no in-place form", op=_site("Program"))
        self.name, self.collective, self.protocol = name, collective, protocol
        self.inplace, self.instances = inplace, instances
        self.min_bytes, self.max_bytes = min_bytes, max_bytes
        self.loop_unit, self.align = loop_unit, align
        self.nranks = collective.nranks
        self._ranks = [RankIR(r) for r in range(self.nranks)]
        self._chan = [dict() for _ in range(self.nranks)]
        self._loop = None
        self._nloops = 0
        self._subset_barriers = set()  # (channel kind, tb) of barriers over some ranks

    # ---- buffers
    def _check_rank(self, r, what):
        if not isinstance(r, int) or not 0 <= r < self.nranks:
            raise UnknownPeerError(f"rank {r} is not in this {self.nranks}-rank program",
                                   op=_site(what))

    def rank(self, r):
        self._check_rank(r, "rank")
        c = self.collective
        out = Buffer(r, "output", c.out_chunks)
        if self.inplace and c.inplace_output_offset(r) is not None:
            # the output is part of the input: a view onto it, as NCCL's in-place ReduceScatter
            out = Buffer(r, "output", c.out_chunks, "input", c.inplace_output_offset(r))
            inp = Buffer(r, "input", c.in_chunks)
        elif self.inplace:
            off = c.inplace_offset(r)
            inp = Buffer(r, "input", c.in_chunks, "output", off) if off is not None else \
                Buffer(r, "input", 0)
        else:
            inp = Buffer(r, "input", c.in_chunks)
        return RankView(inp, out, Buffer(r, "scratch", None))

    def input(self, r):
        return self.rank(r).input

    def output(self, r):
        return self.rank(r).output

    def scratch(self, r):
        return self.rank(r).scratch

    # ---- channels
    def _endpoint(self, rank, channel):
        key = channel.key()
        if key not in self._chan[rank]:
            self._chan[rank][key] = len(self._ranks[rank].channels)
            self._ranks[rank].channels.append(channel)
        return self._chan[rank][key]

    def _chan_index(self, rank, key):
        return self._chan[rank][key]

    def _pair(self, kind, src, dst, index):
        self._check_rank(src, f"{kind}_channel")
        self._check_rank(dst, f"{kind}_channel")
        if src == dst:
            raise UnknownPeerError(f"a {kind} channel from rank {src} to itself",
                                   op=_site(f"{kind}_channel"), rank=src)
        self._endpoint(src, Channel(kind, index, peer=dst))
        self._endpoint(dst, Channel(kind, index, peer=src))

    def memory_channel(self, src, dst, index=0):
        """Rank src's end of the memory channel between src and dst (parallel ones by index)."""
        self._pair("memory", src, dst, index)
        return MemoryChannel(self, "memory", src, dst, index)

    def port_channel(self, src, dst, index=0):
        self._pair("port", src, dst, index)
        return PortChannel(self, "port", src, dst, index)

    def switch_channel(self, ranks, buffer="scratch", index=0):
        ranks = list(ranks)
        for r in ranks:
            self._check_rank(r, "switch_channel")
        if len(set(ranks)) != len(ranks) or len(ranks) < 2:
            raise UnknownPeerError(f"a switch channel needs two or more distinct ranks, not "
                                   f"{ranks}", op=_site("switch_channel"))
        for r in ranks:
            self._endpoint(r, Channel("switch", index, peers=ranks, buffer=buffer))
        return SwitchChannel(self, ranks, buffer, index)

    def semaphore(self, rank):
        self._check_rank(rank, "semaphore")
        r = self._ranks[rank]
        r.semaphores += 1
        return Semaphore(self, rank, r.semaphores - 1)

    # ---- local operations
    def _ll(self, protocol):
        p = protocol or (self.protocol if self.protocol != "simple" else "ll16")
        if p not in PACKET_PROTOCOLS:
            raise ProgramError(f"packet protocol must be one of {PACKET_PROTOCOLS}, not {p!r}",
                               op=_site("packets"))
        return p

    def _sources(self, rank, srcs, count, what):
        refs = []
        for s in srcs:
            if isinstance(s, _RemoteChunk):
                if s.channel.kind != "memory":
                    raise ProgramError("only memory channels read peers' chunks", op=_site(what),
                                       rank=rank)
                refs.append(s.ref_)
            else:
                if s.rank != rank:
                    raise UnknownChannelError(
                        f"source {s} is on rank {s.rank}, but the {what} runs on rank {rank}: "
                        f"read it through a memory channel (channel.remote(chunk))",
                        op=_site(what), rank=rank)
                refs.append(s.ref())
            if s.count != count:
                raise ProgramError(f"{what}: sources and destination differ in size",
                                   op=_site(what), rank=rank)
        if not 1 <= len(refs) <= 8:
            raise ProgramError(f"{what} takes 1 to 8 sources, not {len(refs)}", op=_site(what),
                               rank=rank)
        return refs

    def copy(self, dst, src, tb):
        if src.rank != dst.rank:
            raise UnknownChannelError(f"copy from rank {src.rank} to rank {dst.rank}: use a "
                                      f"channel", op=_site("copy"), rank=dst.rank)
        if src.count != dst.count:
            raise ProgramError("copy: source and destination differ in size", op=_site("copy"),
                               rank=dst.rank)
        self._emit(dst.rank, tb, "copy", src=[src.ref()], dst=[dst.ref()])

    def reduce(self, dst, srcs, tb):
        """dst = sum of srcs (local chunks, or peers' via MemoryChannel.remote)."""
        refs = self._sources(dst.rank, srcs, dst.count, "reduce")
        self._emit(dst.rank, tb, "reduce", src=refs, dst=[dst.ref()])

    def reduce_packets(self, dst, srcs, tb, protocol=None):
        """dst = srcs[0] + the payloads of the packet areas srcs[1:] (local scratch)."""
        refs = self._sources(dst.rank, srcs, dst.count, "reduce_packets")
        self._emit(dst.rank, tb, "reduce_packets", src=refs, dst=[dst.ref()],
                   protocol=self._ll(protocol))

    def barrier(self, tb, ranks=None, channel="memory"):
        """The ranks meet: nothing after the barrier in block `tb` of any of them runs before
        everything before it in block `tb` of all of them. Over all ranks (the default) it is
        the plan's `barrier` op. Over a subset it is a signal to every other member, then a wait
        for every other member, on `channel` ("memory" or "port") channels of their own index
        (one past every index the program uses), so the other ranks run on."""
        if ranks is None:
            ranks = list(range(self.nranks))
        ranks = list(ranks)
        for r in ranks:
            self._check_rank(r, "barrier")
        if len(set(ranks)) != len(ranks):
            raise ProgramError(f"barrier over {ranks}: a rank twice", op=_site("barrier"))
        if channel not in ("memory", "port"):
            raise ProgramError(f"barrier channel must be memory or port, not {channel!r}",
                               op=_site("barrier"))
        if sorted(ranks) == list(range(self.nranks)):
            for r in ranks:
                self._emit(r, tb, "barrier")
            return
        if not isinstance(tb, int) or tb < 0:
            raise ProgramError(f"a barrier runs on one thread block (an integer >= 0), not "
                               f"{tb!r}", op=_site("barrier"))
        # Lowered in ir(), once every channel index the program uses is known.
        self._subset_barriers.add((channel, tb))
        for r in ranks:
            self._emit(r, tb, "barrier")
            self._ranks[r].tbs[tb][-1].members = (tuple(sorted(ranks)), channel)

    def _lower_subset_barriers(self, ranks):
        """Subset barriers into signals and waits, on channels of an index no other operation
        uses (one index per barrier block and channel kind: one block drives each end)."""
        top = max((c.index for r in ranks for c in r.channels), default=-1) + 1
        index = {key: top + i for i, key in enumerate(sorted(self._subset_barriers))}
        chan = {(r.rank, c.key()): i for r in ranks for i, c in enumerate(r.channels)}

        def end(kind, rank, peer, idx):
            key = (rank, (kind, peer, idx))
            if key not in chan:
                chan[key] = len(ranks[rank].channels)
                ranks[rank].channels.append(Channel(kind, idx, peer=peer))
            return chan[key]

        for r in ranks:
            for tb, ops in r.tbs.items():
                out = []
                for op in ops:
                    members = getattr(op, "members", None)
                    if op.name != "barrier" or members is None:
                        out.append(op)
                        continue
                    group, kind = members
                    idx = index[(kind, tb)]
                    peers = [p for p in group if p != r.rank]
                    for name in ("signal", "wait"):
                        for p in peers:
                            end(kind, p, r.rank, idx)  # the peer's end of the connection
                            out.append(Op(name, ch=end(kind, r.rank, p, idx), loop=op.loop,
                                          path=op.path, line=op.line, via=op.via))
                r.tbs[tb] = out
        return ranks

    @contextlib.contextmanager
    def loop(self):
        """Operations made inside repeat over successive `loop_unit` slices of their chunks."""
        if self.loop_unit <= 0:
            raise ProgramError("prog.loop() needs Program(loop_unit=...)", op=_site("loop"))
        if self._loop is not None:
            raise ProgramError("loops do not nest", op=_site("loop"))
        self._loop = self._nloops
        self._nloops += 1
        try:
            yield
        finally:
            self._loop = None

    def _emit(self, rank, tb, name, **fields):
        path, line, via = _caller()
        tbs = tb.tbs if isinstance(tb, TBGroup) else [tb]
        for i, t in enumerate(tbs):
            if not isinstance(t, int) or t < 0:
                raise ProgramError(f"thread block must be an integer >= 0, not {t!r}",
                                   op=Op(name, path=path, line=line, via=via), rank=rank)
            op = Op(name, loop=self._loop, path=path, line=line, via=via, **fields)
            if len(tbs) > 1:
                op.tbg_index, op.tbg_size = i, len(tbs)
            self._ranks[rank].tbs.setdefault(t, []).append(op)

    # ---- output
    def ir(self):
        """The program as compiler IR (before any pass)."""
        ranks = self._ranks
        if self._subset_barriers:
            ranks = self._lower_subset_barriers(copy.deepcopy(ranks))
        return PlanIR(self.name, self.collective, self.protocol, self.inplace, ranks,
                      self.min_bytes, self.max_bytes, self.align, self.loop_unit)

    def compile(self):
        """Runs every pass; returns the plan document (a dict). Raises a DslError subclass."""
        from .compiler import compile_program
        return compile_program(self)
