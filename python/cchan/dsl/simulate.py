"""Pass: a simulated run of the plan, to find deadlocks and races.

Every thread block is an actor with a vector clock. Signals, semaphore releases, barriers and LL
packets carry the sender's clock to the receiver (happens-before). Each chunk slice remembers its
last writers and the readers since; an access that does not happen after a conflicting one is a
race. Port-channel puts complete only at a later signal or flush of their channel, so a reader
must be ordered after that, and their source may be overwritten only after a flush. The schedule
runs every block as far as it can, round robin; if blocks remain that cannot move, that is a
deadlock. The executed order (a valid schedule) is returned for verify.py.

Because each channel end and semaphore side is driven by one block (check.py) and waits consume
signals in order, the blocks form a deterministic network: one schedule decides deadlock for all.
"""
from collections import defaultdict, deque

from .errors import DeadlockError, RaceError
from .ir import owners, unroll


class _Event:
    __slots__ = ("actor", "t", "op", "rank", "tb", "port", "done_sig", "done_flush", "group")

    def __init__(self, actor, t, op, rank, tb, port, group):
        self.actor, self.t, self.op, self.rank, self.tb = actor, t, op, rank, tb
        self.port, self.group = port, group
        self.done_sig = self.done_flush = None

    def where(self):
        if self.op is None:
            return (f"rank {self.rank}'s caller (the buffer is not this run's until rank "
                    f"{self.rank} has started it: synchronize with it first)")
        loc = self.op.path_line() or "?"
        return f"{self.op.name} of rank {self.rank} thread block {self.tb} ({loc})"


class _Slot:
    __slots__ = ("writes", "reads")

    def __init__(self):
        self.writes, self.reads = [], []


def _slot_name(slot):
    rank, buf, chunk, s = slot
    return f"{buf}[{chunk}] of rank {rank}" + (f" (slice {s})" if s else "")


class Simulator:
    def __init__(self, ir, iters):
        self.ir, self.iters = ir, iters
        self.actors = [(rank, tb) for rank, tb, _ in ir.blocks()]
        self.streams = [unroll(ops, iters) for _, _, ops in ir.blocks()]
        n = len(self.actors)
        # Actor n + q stands for rank q's caller: the buffers are the caller's until rank q's
        # blocks start, and again once they have all finished (checked at the end of the run).
        self.nreal = n
        self.vc = [[0] * (n + ir.nranks) for _ in range(n)]
        for a, (rank, _) in enumerate(self.actors):
            self.vc[a][n + rank] = 1
        self.queues = defaultdict(deque)  # (rank, ch) -> clocks of signals not yet waited for
        self.semq = defaultdict(deque)
        self.barriers = defaultdict(dict)  # k -> {actor: clock}
        self.nbarrier = [0] * n
        self.slots = {}
        self.packets = {}
        self.packet_parts = {}  # slot -> (group, {tbg_index: clock}) while a group writes it
        self.pending = defaultdict(list)  # (actor, ch) -> port events awaiting signal/flush
        self.trace = []
        self.pair = {}
        for r in ir.ranks:
            for i, c in enumerate(r.channels):
                if c.type == "switch":
                    continue
                for j, b in enumerate(ir.ranks[c.peer].channels):
                    if b.type == c.type and b.peer == r.rank and b.index == c.index:
                        self.pair[(r.rank, i)] = (c.peer, j)

    # ---- happens-before
    def _done(self, ev, a, same_needs_flush):
        if ev.actor == a:
            if not ev.port:
                return True
            return ev.done_flush is not None or (not same_needs_flush and ev.done_sig is not None)
        times = [t for t in ((ev.t if not ev.port else None), ev.done_sig, ev.done_flush)
                 if t is not None]
        return bool(times) and min(times) <= self.vc[a][ev.actor]

    def _race(self, msg, a, op):
        rank, tb = self.actors[a]
        raise RaceError(msg, op=op, rank=rank, tb=tb)

    # ---- accesses
    def _slots(self, rank, op, ref, slices):
        for o in owners(self.ir, rank, op, ref):
            for c in ref.chunks():
                for s in slices:
                    yield (o, ref.buf, c, s)

    def _slot(self, slot):
        st = self.slots.get(slot)
        if st is None:
            st = self.slots[slot] = _Slot()
            rank = slot[0]
            st.writes = [_Event(self.nreal + rank, 1, None, rank, None, False, None)]
        return st

    def _read(self, a, op, slot, port, t):
        st = self._slot(slot)
        group = op.group_key() if op.tbg_size > 1 else None
        for w in st.writes:
            if group is not None and w.group == group:
                continue
            if not self._done(w, a, False):
                self._race(f"reads {_slot_name(slot)} without synchronizing with the write by "
                           f"{w.where()}: no signal/wait, semaphore, barrier or packet flag that "
                           f"covers that write orders them", a, op)
        rank, tb = self.actors[a]
        ev = _Event(a, t, op, rank, tb, port, group)
        st.reads.append(ev)
        return ev

    def _write(self, a, op, slot, port, t):
        st = self._slot(slot)
        group = op.group_key() if op.tbg_size > 1 else None
        for w in st.writes:
            if group is not None and w.group == group:
                continue
            if w.op is None and op.name == "put_packets":
                continue  # packet areas alternate halves by run (ll_double_buffer)
            if not self._done(w, a, False):
                self._race(f"writes {_slot_name(slot)}, which {w.where()} also writes, with "
                           f"nothing ordering the two writers", a, op)
        for rd in st.reads:
            if (rd.actor == a and rd.op is op) or (group is not None and rd.group == group):
                continue
            if not self._done(rd, a, True):
                why = " (a port put's source is in use until a flush)" if rd.port else ""
                self._race(f"overwrites {_slot_name(slot)} while {rd.where()} may still read "
                           f"it{why}", a, op)
        rank, tb = self.actors[a]
        ev = _Event(a, t, op, rank, tb, port, group)
        if group is not None and st.writes and all(w.group == group for w in st.writes):
            st.writes.append(ev)
        else:
            st.writes = [ev]
        st.reads = []
        return ev

    # ---- one operation
    def _ready(self, a, op, slices):
        rank, _ = self.actors[a]
        if op.name == "wait":
            return bool(self.queues[(rank, op.ch)])
        if op.name == "sem_acquire":
            return bool(self.semq[(rank, op.sem)])
        if op.name in ("read_packets", "reduce_packets"):
            refs = op.src if op.name == "read_packets" else op.src[1:]
            return all(s in self.packets for ref in refs
                       for s in self._slots(rank, op, ref, slices))
        if op.name == "barrier":
            k = self.nbarrier[a]
            arrived = self.barriers[k]
            if a not in arrived:
                arrived[a] = list(self.vc[a])
            return len(arrived) == self.ir.nranks
        return True

    def _join(self, a, clock):
        mine = self.vc[a]
        for i, t in enumerate(clock):
            if t > mine[i]:
                mine[i] = t

    def _put_packets(self, a, op, s):
        """Packets of slot s are readable once every member of the writing group wrote its part
        (each member writes its share of the range, plan-format.md); the reader then sees all
        of their writes."""
        again = s in self.packets
        parts = self.packet_parts.get(s)
        if parts is not None:
            group, seen = parts
            again = group != op.group_key() or op.tbg_index in seen
        if again:
            self._race(f"writes LL packets into {_slot_name(s)} a second time in one run (a "
                       f"packet area holds one run's packets)", a, op)
        if op.tbg_size == 1:
            self.packets[s] = list(self.vc[a])
            return
        if parts is None:
            parts = self.packet_parts[s] = (op.group_key(), {})
        parts[1][op.tbg_index] = list(self.vc[a])
        if len(parts[1]) == op.tbg_size:
            clock = [max(ts) for ts in zip(*parts[1].values())]
            self.packets[s] = clock
            del self.packet_parts[s]

    def _run(self, a, op, slices):
        rank, tb = self.actors[a]
        self.vc[a][a] += 1
        t = self.vc[a][a]
        chans = self.ir.ranks[rank].channels
        port = op.ch is not None and chans[op.ch].type == "port"
        name = op.name
        if name == "wait":
            self._join(a, self.queues[(rank, op.ch)].popleft())
        elif name == "sem_acquire":
            self._join(a, self.semq[(rank, op.sem)].popleft())
        elif name == "barrier":
            k = self.nbarrier[a]
            for clock in self.barriers[k].values():
                self._join(a, clock)
            self.nbarrier[a] += 1
        elif name in ("read_packets", "reduce_packets"):
            refs = op.src if name == "read_packets" else op.src[1:]
            for ref in refs:
                for s in self._slots(rank, op, ref, slices):
                    self._join(a, self.packets[s])
        for ref in op.src:
            for s in self._slots(rank, op, ref, slices):
                ev = self._read(a, op, s, port and name != "get", t)
                if ev.port:
                    self.pending[(a, op.ch)].append(ev)
        for ref in op.dst:
            for s in self._slots(rank, op, ref, slices):
                ev = self._write(a, op, s, port, t)
                if ev.port:
                    self.pending[(a, op.ch)].append(ev)
                if name == "put_packets":
                    self._put_packets(a, op, s)
        if name in ("signal", "put_signal", "put_signal_flush"):
            for ev in self.pending[(a, op.ch)]:
                if ev.done_sig is None:
                    ev.done_sig = t
            self.queues[self.pair[(rank, op.ch)]].append(list(self.vc[a]))
        if name in ("flush", "put_signal_flush"):
            for ev in self.pending.pop((a, op.ch), []):
                ev.done_flush = t
        if name == "sem_release":
            self.semq[(rank, op.sem)].append(list(self.vc[a]))
        self.trace.append((a, op, slices))

    def run(self):
        pcs = [0] * len(self.actors)
        progress = True
        while progress:
            progress = False
            for a, stream in enumerate(self.streams):
                while pcs[a] < len(stream):
                    op, slices = stream[pcs[a]]
                    if not self._ready(a, op, slices):
                        break
                    self._run(a, op, slices)
                    pcs[a] += 1
                    progress = True
        stuck = [(a, self.streams[a][pcs[a]][0]) for a in range(len(self.actors))
                 if pcs[a] < len(self.streams[a])]
        if stuck:
            self._report_deadlock(stuck)
        self._check_end()
        return self.trace

    def _report_deadlock(self, stuck):
        lines = []
        for a, op in stuck:
            rank, tb = self.actors[a]
            lines.append(f"  {op.path_line() or '?'}: rank {rank} thread block {tb}: "
                         f"{self._blocked_on(rank, op)}")
        a, op = stuck[0]
        rank, tb = self.actors[a]
        raise DeadlockError(f"the schedule stops with {len(stuck)} thread block(s) waiting "
                            f"forever:\n" + "\n".join(lines), op=op, rank=rank, tb=tb)

    def _check_end(self):
        """Rank q's run ends when its blocks do: every access to q's memory must be complete by
        then, as seen from q (port puts flushed, peers' accesses synchronized with q)."""
        end = {}
        for a, (rank, _) in enumerate(self.actors):
            clock = end.setdefault(rank, [0] * len(self.vc[a]))
            for i, t in enumerate(self.vc[a]):
                clock[i] = max(clock[i], t)
        for slot, st in self.slots.items():
            q = slot[0]
            clock = end.get(q, [0] * (self.nreal + self.ir.nranks))
            for ev in st.writes + st.reads:
                if ev.op is None:
                    continue
                if ev.rank == q:
                    ok = not ev.port or ev.done_flush is not None
                else:
                    times = [t for t in ((ev.t if not ev.port else None), ev.done_sig,
                                         ev.done_flush) if t is not None]
                    ok = bool(times) and min(times) <= clock[ev.actor]
                if not ok:
                    what = "writes" if ev in st.writes else "reads"
                    fix = " (flush it)" if ev.port and ev.rank == q else \
                        f" (rank {q} must wait for a signal sent after it)"
                    self._race(f"rank {q}'s run can end while this operation still {what} "
                               f"{_slot_name(slot)}{fix}", ev.actor, ev.op)

    def _blocked_on(self, rank, op):
        if op.name == "wait":
            ch = self.ir.ranks[rank].channels[op.ch]
            return f"wait on channel {op.ch} ({ch}) for a signal that never comes"
        if op.name == "sem_acquire":
            return f"sem_acquire of semaphore {op.sem} that is never released"
        if op.name == "barrier":
            return "barrier that some rank never reaches"
        return f"{op.name} for LL packets that are never written"


def simulate(ir, iters=1):
    """Runs the plan once (loops unrolled `iters` times); returns the executed order."""
    return Simulator(ir, iters).run()
