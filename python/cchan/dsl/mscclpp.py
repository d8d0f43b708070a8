"""MSCCL++ execution plans in and out: import_plan (MSCCL++ -> cchan) and export_plan (back).

The MSCCL++ format, as its executor reads it (facts, not code, taken from its sources): a document
with `name`, `collective`, `protocol` ("Simple" or "LL"), `inplace`, optional `buffer_alignment`,
`min_message_size`, `max_message_size` (2^64-1 when unbounded), `use_double_scratch_buffer`,
`reuse_resources`, `num_threads_per_block`, and `gpus`, one per rank: `id`, `input_chunks`,
`output_chunks`, `scratch_chunks`, `channels` (`{channel_type, connected_to: [peers]}`, flattened
per type into the rank's channel list; the k-th channel of r to p pairs with the k-th of p to r),
`remote_buffers` (`{rank, type: i|o|s, access_channel_types}`), `semaphores` (`{init_value}`) and
`threadblocks`: `{id, ops, channels: [{channel_type, channel_ids}], remote_buffer_refs:
[{access_channel_type, remote_buffer_ids}]}`. An op's `channel_ids` index its block's channel list
of the op's `channel_type`, a `buffer_id` its block's remote buffers of that type. Ops do not
synchronize the block (a `nop` does), a memory-channel put addresses the peer's buffer directly,
packet ops address scratch at twice the chunk offset, and a `pipeline` repeats its `ops` over
`unit_size` slices of the whole range of `num_chunks` chunks.

docs/dsl.md, "MSCCL++ plans in and out", says per operation what maps and what does not.
"""
from . import compiler, schema
from .errors import DslError
from .ir import SYNCING
from .vocabulary import FORMAT, LIMITS, REDUCE_OPS, VERSION

NO_LIMIT = 2**64 - 1  # MSCCL++'s max_message_size when the plan has no upper bound
BUF_OUT = {"input": "i", "output": "o", "scratch": "s"}
BUF_IN = {v: k for k, v in BUF_OUT.items()}
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")
PACKET_DST = {"put_packets"}                     # ops whose dst is a packet area
PACKET_SRC = {"read_packets": 0, "reduce_packets": 1}  # ops whose src[i:] are packet areas
# MSCCL++ ops with no cchan operation, and why (the error names the op).
UNMAPPED = {
    "rppkt": "forwarding LL packets without unpacking them has no cchan operation",
    "cpkt": "cchan writes LL packets only into a peer's scratch (put_packets)",
    "recpkt": "cchan writes LL packets only into a peer's scratch (put_packets)",
    "recspkt": "cchan writes LL packets only into a peer's scratch (put_packets)",
    "glres": "switch (NVLS) operations are not converted",
    "glre": "switch (NVLS) operations are not converted",
    "gstore": "switch (NVLS) operations are not converted",
    "gstorepkt": "switch (NVLS) operations are not converted",
}


class InterchangeError(DslError):
    """A plan that does not convert between the MSCCL++ and cchan formats."""


def is_mscclpp(doc):
    """True for what looks like an MSCCL++ execution plan (its `gpus` list, no cchan format)."""
    return isinstance(doc, dict) and doc.get("format") != FORMAT and "gpus" in doc


def not_cchan_message(path):
    return (f"{path}: this is an MSCCL++ execution plan, not a cchan plan; convert it first: "
            f"python3 -m cchan.dsl import-mscclpp {path} -o PLAN.json")


def _err(msg, op=None, rank=None, tb=None):
    where = []
    if rank is not None:
        where.append(f"rank {rank}")
    if tb is not None:
        where.append(f"thread block {tb}")
    head = f"{op}" if op else ""
    if where:
        head += f" ({', '.join(where)})"
    return InterchangeError(f"{head}: {msg}" if head else msg)


# ------------------------------------------------------------------------------------------------
# cchan -> MSCCL++


def _ratio(doc):
    """MSCCL++ bounds AllGather by its output size, the others by the input (cchan: input)."""
    b = doc["buffers"]
    return b["output"] // b["input"] if doc["collective"] == "allgather" else 1


class _Exporter:
    def __init__(self, doc):
        self.doc = doc
        self.factor = doc["scratch_chunk_factor"]

    def run(self):
        d = self.doc
        if d["collective"] not in COLLECTIVES + ("broadcast", "custom"):
            raise _err(f"collective {d['collective']!r} has no MSCCL++ name")
        r = _ratio(d)
        out = {
            "name": d["name"], "collective": d["collective"],
            "protocol": "LL" if self.factor == 2 else "Simple", "inplace": d["inplace"],
            "reuse_resources": False, "num_threads_per_block": 1024,
            "use_double_scratch_buffer": d["ll_double_buffer"], "buffer_alignment": d["align"],
            "min_message_size": d["min_bytes"] * r,
            "max_message_size": d["max_bytes"] * r if d["max_bytes"] else NO_LIMIT,
        }
        # MSCCL++'s loader ignores fields it does not know: what it has no equivalent for rides
        # along so that import-mscclpp restores it.
        ext = {}
        for key in ("root", "postcondition", "precondition"):
            if key in d:
                ext[key] = d[key]
        protos = {o.get("protocol") for rk in d["ranks"] for t in rk["threadblocks"]
                  for o in t["ops"]} - {None}
        if len(protos) > 1:
            raise _err(f"packet ops use {sorted(protos)}: MSCCL++ takes one packet type per "
                       f"execution, not per operation")
        if protos:
            ext["packet_protocol"] = protos.pop()
        if ext:
            out["cchan"] = ext
        out["gpus"] = [self.rank(rk) for rk in d["ranks"]]
        return out

    def rank(self, rk):
        r = rk["rank"]
        self.r = r
        chans = rk["channels"]
        for i, c in enumerate(chans):
            if c["type"] == "switch":
                raise _err("switch channels are not converted (MSCCL++ builds NVLS groups its "
                           "own way)", f"channel {i}", rank=r)
        # Pairing is by order per (type, peer): emit each group in index order on every rank.
        order = sorted(range(len(chans)), key=lambda i: (chans[i]["type"], chans[i]["peer"],
                                                         chans[i]["index"]))
        self.flat = {}  # cchan channel -> (type, flattened id)
        count = {"memory": 0, "port": 0}
        for i in order:
            t = chans[i]["type"]
            self.flat[i] = (t, count[t])
            count[t] += 1
        self.chans = chans
        self.remote = []  # gpu.remote_buffers
        self.remote_ids = {}
        gpu = {
            "id": r, "input_chunks": self.doc["buffers"]["input"],
            "output_chunks": self.doc["buffers"]["output"],
            "scratch_chunks": rk["scratch_chunks"],
            "channels": [{"channel_type": chans[i]["type"], "connected_to": [chans[i]["peer"]]}
                         for i in order],
            "remote_buffers": self.remote,
            "semaphores": [{"init_value": 0} for _ in range(rk["semaphores"])],
            "threadblocks": [self.block(t) for t in rk["threadblocks"]],
        }
        return gpu

    def block(self, t):
        self.tb = t["id"]
        self.tb_ch = {"memory": [], "port": []}
        self.tb_buf = {"memory": [], "port": []}
        ops, i = [], 0
        src = t["ops"]
        while i < len(src):
            o = src[i]
            if o["op"] == "loop":
                body = src[i + 1:i + 1 + o["body"]]
                for b in body:
                    self.loop_body_ok(b)
                inner = []
                for b in body:
                    inner += self.op(b)
                ops.append({"name": "pipeline", "iter_context": {
                    "unit_size": self.doc["loop_unit"], "num_chunks": 1}, "ops": _nops(inner)})
                i += 1 + o["body"]
                continue
            ops += self.op(o)
            i += 1
        return {"id": self.tb, "ops": _nops(ops),
                "channels": [{"channel_type": k, "channel_ids": v}
                             for k, v in self.tb_ch.items() if v],
                "remote_buffer_refs": [{"access_channel_type": k, "remote_buffer_ids": v}
                                       for k, v in self.tb_buf.items() if v]}

    def loop_body_ok(self, o):
        why = None
        if o.get("tbg_size", 1) > 1:
            why = ("a thread-block group inside a loop: MSCCL++ slices each member's part, "
                   "cchan slices the range before splitting it")
        elif o["op"] in PACKET_DST or o["op"] in PACKET_SRC:
            why = "MSCCL++'s packet operations ignore the pipeline's slices"
        elif any(ref["count"] > 1 for ref in o.get("src", []) + o.get("dst", [])):
            why = ("a ref of several chunks inside a loop: MSCCL++'s pipeline slices the whole "
                   "range, cchan's loop each chunk")
        if why:
            raise _err(why, o["op"], self.r, self.tb)

    def ch_id(self, ch):
        t, fid = self.flat[ch]
        lst = self.tb_ch[t]
        if fid not in lst:
            lst.append(fid)
        return t, lst.index(fid)

    def ref(self, o, ref, packets):
        if ref["count"] > 1 and ref.get("stride", 1) != 1:
            raise _err(f"strided ref {ref}: MSCCL++ refs are contiguous", o["op"], self.r,
                       self.tb)
        index, size = ref["chunk"], ref["count"]
        if ref["buf"] == "scratch" and self.factor == 2 and not packets:
            # LL plans: MSCCL++ addresses scratch at chunk size for plain ops, cchan at 2 chunks.
            if size != 1:
                raise _err(f"plain ref {ref} of several scratch chunks in an LL plan: the chunks "
                           f"are not contiguous in MSCCL++'s scratch", o["op"], self.r, self.tb)
            index *= 2
        out = {"index": index, "size": size}
        if "ch" not in ref:
            out["type"] = BUF_OUT[ref["buf"]]
            return out
        t, _ = self.ch_id(ref["ch"])
        key = (self.chans[ref["ch"]]["peer"], ref["buf"], t)
        if key not in self.remote_ids:
            self.remote_ids[key] = len(self.remote)
            self.remote.append({"rank": key[0], "type": BUF_OUT[key[1]],
                                "access_channel_types": [t]})
        rid = self.remote_ids[key]
        lst = self.tb_buf[t]
        if rid not in lst:
            lst.append(rid)
        out["buffer_id"] = lst.index(rid)
        return out

    def op(self, o):
        name, r, tb = o["op"], self.r, self.tb
        m = {}
        ctype = None
        if "ch" in o:
            ctype, cid = self.ch_id(o["ch"])
        pk_src = PACKET_SRC.get(name)
        srcs = [self.ref(o, s, pk_src is not None and i >= pk_src)
                for i, s in enumerate(o.get("src", []))]
        dsts = [self.ref(o, s, name in PACKET_DST) for s in o.get("dst", [])]
        tbg = {"tbg_info": {"tb_id": o["tbg_index"], "tbg_size": o["tbg_size"]}} \
            if o.get("tbg_size", 1) > 1 else {}

        def data(mname, s, d, chan=True, reduce=False):
            x = {"name": mname, "src_buff": s, "dst_buff": d}
            if chan and "ch" in o:
                x["channel_ids"] = [cid]
                x["channel_type"] = ctype
            elif chan:
                x["channel_type"] = "memory"  # remote sources: read through the mapping
            if reduce:
                x["reduce_op"] = REDUCE_OPS[0]
            x.update(tbg)
            return x

        nop = {"name": "nop"}
        if name == "put":
            return [data("put", srcs, dsts)]
        if name in ("put_signal", "put_signal_flush"):
            if ctype == "port":
                return [data("pws" if name == "put_signal" else "pwsf", srcs, dsts), nop]
            # MSCCL++'s pws on a memory channel moves the data but raises no semaphore.
            return [data("put", srcs, dsts), nop,
                    {"name": "signal", "channel_ids": [cid], "channel_type": ctype}, nop]
        if name == "get":
            return [data("get", srcs, dsts)]
        if name == "signal":
            return [nop, {"name": "signal", "channel_ids": [cid], "channel_type": ctype}, nop]
        if name == "wait":
            return [{"name": "wait", "channel_ids": [cid], "channel_type": ctype}, nop]
        if name == "flush":
            if ctype == "memory":
                return []  # nothing on a memory channel (plan-format.md); MSCCL++ has no such op
            return [{"name": "flush", "channel_ids": [cid], "channel_type": ctype}]
        if name == "put_packets":
            return [data("ppkt", srcs, dsts)]
        if name == "read_packets":
            return [data("upkt", srcs, dsts, chan=False)]
        if name == "reduce_packets":
            return [data("repkt", srcs, dsts, chan=False, reduce=True)]
        if name == "copy":
            return [data("copy", srcs, dsts, chan=False)]
        if name in ("reduce", "reduce_put"):
            local = [s for s, j in zip(srcs, o["src"]) if "ch" not in j]
            remote = [s for s, j in zip(srcs, o["src"]) if "ch" in j]
            if remote and len(local) != 1:
                raise _err(f"{len(local)} local sources with remote ones: MSCCL++'s read-reduce "
                           f"takes exactly one local source, first", name, r, tb)
            if not local:
                raise _err("no local source: MSCCL++'s reductions start from a local one",
                           name, r, tb)
            if name == "reduce":
                x = data("rre" if remote else "re", local + remote, dsts, chan=bool(remote),
                         reduce=True)
                return [x]
            if len(o["dst"]) < 2:
                raise _err("reduce_put without its local copy: MSCCL++'s reduce-send always "
                           "writes a local result", name, r, tb)
            x = data("rres" if remote else "res", local + remote, [dsts[1], dsts[0]],
                     reduce=True)
            return [x]
        if name == "sem_release":
            return [nop, {"name": "sem_release", "semaphore_ids": [o["sem"]]}, nop]
        if name == "sem_acquire":
            return [{"name": "sem_acquire", "semaphore_ids": [o["sem"]]}, nop]
        if name == "sync":
            return [nop]
        if name == "barrier":
            raise _err("cchan's barrier joins ranks; MSCCL++'s barrier joins thread blocks of "
                       "one GPU (no equivalent)", name, r, tb)
        raise _err("no MSCCL++ equivalent (switch operations are not converted)", name, r, tb)


def _nops(ops):
    """Consecutive nops are one."""
    out = []
    for o in ops:
        if o["name"] == "nop" and out and out[-1]["name"] == "nop":
            continue
        out.append(o)
    return out


def export_plan(doc):
    """The MSCCL++ execution plan of a cchan plan document (checked against the schema first).
    Raises InterchangeError naming the operation that has no MSCCL++ equivalent."""
    schema.validate_plan(doc)
    return _Exporter(doc).run()


# ------------------------------------------------------------------------------------------------
# MSCCL++ -> cchan


def _need(d, key, what):
    if not isinstance(d, dict) or key not in d:
        raise _err(f"{what} has no {key!r}")
    return d[key]


class _Importer:
    def __init__(self, m):
        self.m = m
        ext = m.get("cchan") if isinstance(m.get("cchan"), dict) else {}
        self.ext = ext
        self.protocol = ext.get("packet_protocol", "ll16")  # MSCCL++ executes LL16 by default

    def run(self):
        m = self.m
        gpus = _need(m, "gpus", "the plan")
        if not isinstance(gpus, list) or not gpus:
            raise _err("'gpus' must be a non-empty list")
        n = len(gpus)
        for i, g in enumerate(gpus):
            if _need(g, "id", f"gpus[{i}]") != i:
                raise _err(f"gpus[{i}] has id {g['id']}: gpus must be in rank order")
        # reuse_resources: MSCCL++ keeps one fixed scratch across calls and, where a chunk is
        # larger than its share of it, runs the plan piece by piece through it. cchan sizes the
        # scratch by each call, so the plan runs as MSCCL++ runs it where the chunks fit: the same
        # writes, with the scratch bounded by the call instead of by a constant.
        proto = _need(m, "protocol", "the plan")
        if proto not in ("Simple", "LL"):
            raise _err(f"protocol {proto!r} (MSCCL++ has Simple and LL)")
        self.factor = 2 if proto == "LL" else 1
        ins = {g["input_chunks"] for g in gpus}
        outs = {g["output_chunks"] for g in gpus}
        if len(ins) != 1 or len(outs) != 1:
            raise _err("ranks with different input or output chunk counts: a cchan plan has one "
                       "buffer shape for every rank")
        self.n = n
        self.inc, self.outc = ins.pop(), outs.pop()
        kind = _need(m, "collective", "the plan")
        if kind not in COLLECTIVES + ("broadcast",):
            kind = "custom"  # test, sendrecv, custom: no built-in postcondition
        self.kind = kind
        self.inplace = bool(_need(m, "inplace", "the plan"))
        if self.inplace and kind == "custom":
            raise _err("an in-place custom collective: cchan cannot tell where the input lies "
                       "in the output")
        align = m.get("buffer_alignment", 16)
        if self.inc == 0:
            raise _err("input_chunks 0: cchan sizes chunks by the input")
        self.align = align
        self.loop_unit = None
        doc = {"format": FORMAT, "version": VERSION, "name": str(_need(m, "name", "the plan")),
               "collective": kind, "nranks": n}
        if kind == "broadcast":
            doc["root"] = self.ext.get("root", 0)
        ratio = self.outc // self.inc if kind == "allgather" and self.inc else 1
        lo = m.get("min_message_size", 0)
        hi = m.get("max_message_size", NO_LIMIT)
        self.ranks = [self.rank_channels(g) for g in gpus]
        self.pair_ends()
        for g in gpus:
            self.rank_ops(g)
        self.resolve_packet_readers()
        packets = any(o["op"] in PACKET_DST or o["op"] in PACKET_SRC
                      for rk in self.ranks for t in rk["threadblocks"] for o in t["ops"])
        doc.update({
            "protocol": self.protocol if packets else "simple", "inplace": self.inplace,
            "reduce_op": REDUCE_OPS[0], "min_bytes": -(-lo // ratio),
            "max_bytes": 0 if hi >= NO_LIMIT else hi // ratio, "align": align,
            "granularity": self.inc * align, "loop_unit": self.loop_unit or 0,
            "buffers": {"input": self.inc, "output": self.outc,
                        "scratch": max(g["scratch_chunks"] for g in gpus)},
            "scratch_chunk_factor": self.factor,
            # Back-to-back runs of a packet plan need the two halves (plan-format.md,
            # Re-running): a fast peer's next run must not overwrite packets still being read.
            "ll_double_buffer": packets or bool(m.get("use_double_scratch_buffer", False)),
        })
        if kind == "custom":
            for key in ("postcondition", "precondition"):
                if key in self.ext:
                    doc[key] = self.ext[key]
        for rk in self.ranks:
            for c in rk["channels"]:
                c["remote_buffers"] = sorted(c.pop("_bufs"), key=list(BUF_OUT).index)
        doc["ranks"] = self.ranks
        return doc

    def rank_channels(self, g):
        r = g["id"]
        chans, flat, seen = [], {"memory": [], "port": []}, {}
        for c in g.get("channels", []):
            t = c.get("channel_type")
            if t == "switch":
                raise _err("switch (NVLS) channels are not converted", "channel", rank=r)
            if t not in flat:
                raise _err(f"channel type {t!r}", "channel", rank=r)
            for p in c.get("connected_to", []):
                k = seen.get((t, p), 0)
                seen[(t, p)] = k + 1
                if k > LIMITS["max_channel_index"]:
                    raise _err(f"more than {LIMITS['max_channel_index'] + 1} {t} channels to "
                               f"rank {p}", "channel", rank=r)
                flat[t].append(len(chans))
                chans.append({"type": t, "peer": p, "index": k, "_bufs": set()})
        for s in g.get("semaphores", []):
            if s.get("init_value", 0) != 0:
                raise _err(f"a semaphore starting at {s['init_value']}: cchan's start at 0",
                           "semaphore", rank=r)
        return {"rank": r, "scratch_chunks": g["scratch_chunks"],
                "semaphores": len(g.get("semaphores", [])), "channels": chans,
                "threadblocks": [], "_flat": flat, "_remote": g.get("remote_buffers", [])}

    def pair_ends(self):
        """MSCCL++ builds the missing end of a one-sided channel itself; cchan plans list both."""
        for rk in self.ranks:
            for c in list(rk["channels"]):
                if not 0 <= c["peer"] < self.n or c["peer"] == rk["rank"]:
                    raise _err(f"a {c['type']} channel to rank {c['peer']}", "channel",
                               rank=rk["rank"])
                other = self.ranks[c["peer"]]["channels"]
                if not any(o["type"] == c["type"] and o["peer"] == rk["rank"] and
                           o["index"] == c["index"] for o in other):
                    other.append({"type": c["type"], "peer": rk["rank"], "index": c["index"],
                                  "_bufs": set()})

    # -- operations

    def block_barriers(self, r, blocks):
        """The blocks of each MSCCL++ barrier id (a barrier among a rank's thread blocks), checked
        against the count its operations name. cchan has no such barrier: it becomes rank-local
        semaphores (block_barrier)."""
        members, counts = {}, {}

        def walk(ops, tb):
            for o in ops:
                if o.get("name") == "pipeline":
                    walk(o.get("ops", []), tb)
                elif o.get("name") == "barrier":
                    bid = _need(o, "barrier_id", "barrier")
                    members.setdefault(bid, set()).add(tb)
                    counts.setdefault(bid, set()).add(_need(o, "num_threadblocks", "barrier"))

        for t in blocks:
            walk(t.get("ops", []), t["id"])
        for bid, tbs in members.items():
            if counts[bid] != {len(tbs)}:
                raise _err(f"barrier {bid} names {sorted(counts[bid])} thread blocks, but "
                           f"{len(tbs)} blocks take part in it ({sorted(tbs)})", "barrier",
                           rank=r)
        self.barriers = {bid: sorted(tbs) for bid, tbs in members.items()}
        self.barrier_sems = {}  # (barrier id, occurrence, from block, to block) -> semaphore
        self.barrier_seen = {}  # (block, barrier id) -> occurrences converted so far

    def block_barrier(self, o):
        """A barrier among K blocks of this rank, as rank-local semaphores: each block releases
        one semaphore to every other member, then acquires one from every other member (one
        releaser and one acquirer per semaphore, as cchan's verifier wants). The n-th barrier of
        an id in one block meets the n-th in the others."""
        bid = o["barrier_id"]
        n = self.barrier_seen.get((self.tb, bid), 0)
        self.barrier_seen[(self.tb, bid)] = n + 1
        rk = self.ranks[self.r]

        def sem(a, b):
            key = (bid, n, a, b)
            if key not in self.barrier_sems:
                self.barrier_sems[key] = rk["semaphores"]
                rk["semaphores"] += 1
                if rk["semaphores"] > LIMITS["max_semaphores"]:
                    raise _err(f"block barriers need more than {LIMITS['max_semaphores']} "
                               f"rank-local semaphores", "barrier", self.r, self.tb)
            return self.barrier_sems[key]

        others = [b for b in self.barriers[bid] if b != self.tb]
        return ([{"op": "sem_release", "sem": sem(self.tb, b)} for b in others] +
                [{"op": "sem_acquire", "sem": sem(b, self.tb)} for b in others])

    def rank_ops(self, g):
        r = g["id"]
        rk = self.ranks[r]
        blocks = sorted(g.get("threadblocks", []), key=lambda t: t["id"])
        if [t["id"] for t in blocks] != list(range(len(blocks))):
            raise _err("thread block ids must be 0 .. n-1", rank=r)
        self.block_barriers(r, blocks)
        for t in blocks:
            self.r, self.tb = r, t["id"]
            self.tb_ch = {"memory": [], "port": []}
            self.tb_buf = {"memory": [], "port": []}
            for c in t.get("channels", []):
                self.tb_ch.setdefault(c["channel_type"], []).extend(c.get("channel_ids", []))
            for b in t.get("remote_buffer_refs", []):
                self.tb_buf.setdefault(b["access_channel_type"], []).extend(
                    b.get("remote_buffer_ids", []))
            out = []
            for o in t.get("ops", []):
                if o.get("name") == "pipeline":
                    body = []
                    ctx = _need(o, "iter_context", "pipeline")
                    unit, nch = ctx["unit_size"], ctx["num_chunks"]
                    if self.loop_unit not in (None, unit):
                        raise _err(f"unit_size {unit} where another pipeline has "
                                   f"{self.loop_unit}: a cchan plan has one loop unit",
                                   "pipeline", r, self.tb)
                    if unit % self.align:
                        raise _err(f"unit_size {unit} is not a multiple of the alignment "
                                   f"{self.align}", "pipeline", r, self.tb)
                    self.loop_unit = unit
                    for inner in o.get("ops", []):
                        self.pipeline_ok(inner, nch)
                        body += self.op(inner)
                    body = _tidy(body, rk["channels"])
                    if body:
                        out.append({"op": "loop", "body": len(body)})
                        out += body
                    continue
                out += self.op(o)
            rk["threadblocks"].append({"id": self.tb, "ops": _tidy(out, rk["channels"])})

    def pipeline_ok(self, o, nch):
        name = o.get("name")
        why = None
        if name == "pipeline":
            why = "a pipeline inside a pipeline"
        elif "tbg_info" in o and o["tbg_info"].get("tbg_size", 1) > 1:
            why = ("a thread-block group inside a pipeline: MSCCL++ slices each member's part, "
                   "cchan slices the range before splitting it")
        elif name in ("ppkt", "upkt", "repkt", "respkt"):
            why = "packet operations ignore the pipeline's slices in MSCCL++"
        elif any(b.get("size", 1) != 1 for b in o.get("src_buff", []) + o.get("dst_buff", [])) \
                or (nch != 1 and (o.get("src_buff") or o.get("dst_buff"))):
            why = ("a pipeline over several chunks: MSCCL++ slices the whole range, cchan's "
                   "loop each chunk")
        if why:
            raise _err(why, name, self.r, self.tb)

    def channel(self, t, tb_index):
        lst = self.tb_ch.get(t, [])
        if not 0 <= tb_index < len(lst):
            raise _err(f"channel_ids entry {tb_index}: the block has {len(lst)} {t} channels",
                       self.cur, self.r, self.tb)
        flat = self.ranks[self.r]["_flat"][t]
        fid = lst[tb_index]
        if not 0 <= fid < len(flat):
            raise _err(f"{t} channel {fid}: the rank has {len(flat)}", self.cur, self.r, self.tb)
        return flat[fid]

    def channel_to(self, t, peer, hint):
        """The cchan channel reaching `peer`: the op's own channel_ids entry when it goes
        there, else one of the block's channels to it, else any of the rank's."""
        chans = self.ranks[self.r]["channels"]
        cands = []
        if hint is not None:
            cands.append(hint)
        cands += [self.ranks[self.r]["_flat"][t][f] for f in self.tb_ch.get(t, [])
                  if f < len(self.ranks[self.r]["_flat"][t])]
        cands += range(len(chans))
        for i in cands:
            if chans[i]["type"] == t and chans[i]["peer"] == peer:
                return i
        raise _err(f"reaches rank {peer}'s memory, but this rank has no {t} channel to it",
                   self.cur, self.r, self.tb)

    def ref(self, b, ctype, packets, hint=None):
        if "switch_channel_id" in b:
            raise _err("switch (NVLS) buffers are not converted", self.cur, self.r, self.tb)
        index, size = b.get("index"), b.get("size")
        if not isinstance(index, int) or not isinstance(size, int) or size < 1:
            raise _err(f"buffer ref {b}: needs integer index and size", self.cur, self.r,
                       self.tb)
        if "buffer_id" in b:
            t = ctype or "memory"
            lst = self.tb_buf.get(t, [])
            if not 0 <= b["buffer_id"] < len(lst):
                raise _err(f"buffer_id {b['buffer_id']}: the block has {len(lst)} {t} remote "
                           f"buffers", self.cur, self.r, self.tb)
            rem = self.ranks[self.r]["_remote"]
            rid = lst[b["buffer_id"]]
            if not 0 <= rid < len(rem):
                raise _err(f"remote buffer {rid}: the rank has {len(rem)}", self.cur, self.r,
                           self.tb)
            owner, buf = rem[rid]["rank"], BUF_IN.get(rem[rid]["type"])
            ch = self.channel_to(t, owner, hint)
        else:
            owner, buf, ch = self.r, BUF_IN.get(b.get("type")), None
        if buf is None:
            raise _err(f"buffer ref {b}: unknown buffer type", self.cur, self.r, self.tb)
        if buf == "scratch" and self.factor == 2 and not packets:
            if size != 1 or index % 2:
                raise _err(f"plain access to scratch [{index}, {index + size}) of an LL plan: "
                           f"in cchan's scratch, where each chunk is a packet area of two, it "
                           f"is not one chunk's payload", self.cur, self.r, self.tb)
            index //= 2
        if self.inplace and self.kind == "reducescatter":
            if buf == "output":  # the output is the owner's slice of the input
                buf = "input"
                index += owner * self.outc
        elif buf == "input" and self.inplace:
            buf = "output"
            if self.kind == "allgather":
                index += owner * self.inc
        out = {"buf": buf, "chunk": index, "count": size}
        if ch is not None:
            out["ch"] = ch
            self.ranks[self.r]["channels"][ch]["_bufs"].add(buf)
        return out

    def op(self, o):
        name = o.get("name")
        self.cur = name
        r, tb = self.r, self.tb
        if name in UNMAPPED:
            raise _err(f"no cchan operation: {UNMAPPED[name]}", name, r, tb)
        ctype = o.get("channel_type")
        if ctype == "none":
            ctype = None
        if ctype == "switch":
            raise _err("switch (NVLS) operations are not converted", name, r, tb)
        ids = o.get("channel_ids", [])
        chs = [self.channel(ctype, i) for i in ids] if ctype else []
        extra = {}
        tbg = o.get("tbg_info")
        if tbg and tbg.get("tbg_size", 1) > 1:
            extra = {"tbg_index": tbg["tb_id"], "tbg_size": tbg["tbg_size"]}
        src_b, dst_b = o.get("src_buff", []), o.get("dst_buff", [])

        def hint(i):
            return chs[i] if i < len(chs) else None

        def mk(opname, **kw):
            d = {"op": opname}
            d.update(kw)
            if opname in ("put", "put_signal", "put_signal_flush", "get", "copy", "reduce",
                          "reduce_put", "put_packets", "read_packets", "reduce_packets"):
                d.update(extra)
            return d

        if name == "nop":
            return [{"op": "sync"}]
        if name == "barrier":
            return self.block_barrier(o)
        if name in ("signal", "rlxsignal", "wait", "rlxwait", "flush"):
            base = name.replace("rlx", "")
            if not chs:
                raise _err("no channel_ids", name, r, tb)
            return [mk(base, ch=c) for c in chs]
        if name in ("sem_release", "sem_acquire"):
            return [mk(name, sem=s) for s in o.get("semaphore_ids", [])]
        if name in ("put", "pws", "pwsf"):
            if len(dst_b) != len(src_b):
                raise _err("src_buff and dst_buff differ in length", name, r, tb)
            opname = {"put": "put", "pws": "put_signal", "pwsf": "put_signal_flush"}[name]
            if ctype == "memory":
                opname = "put"  # MSCCL++ raises no semaphore for a memory-channel pws
            out = []
            for i, (s, d) in enumerate(zip(src_b, dst_b)):
                dst = self.ref(d, ctype, False, hint(i))
                out.append(mk(opname, ch=dst["ch"], src=[self.ref(s, ctype, False)],
                              dst=[dst]))
            return out
        if name == "get":
            out = []
            for i, (s, d) in enumerate(zip(src_b, dst_b)):
                src = self.ref(s, ctype, False, hint(i))
                out.append(mk("get", ch=src["ch"], src=[src], dst=[self.ref(d, ctype, False)]))
            return out
        if name == "ppkt":
            if ctype != "memory":
                raise _err("packets over a port channel (MSCCL++ copies packet-formatted "
                           "scratch there): cchan sends LL packets over memory channels",
                           name, r, tb)
            out = []
            for i, (s, d) in enumerate(zip(src_b, dst_b)):
                dst = self.ref(d, ctype, True, hint(i))
                out.append(mk("put_packets", ch=dst["ch"], protocol=self.protocol,
                              src=[self.ref(s, ctype, False)], dst=[dst]))
            return out
        if name == "copy":
            return [mk("copy", src=[self.ref(src_b[0], None, False)],
                       dst=[self.ref(dst_b[0], None, False)])]
        if name == "upkt":
            return [mk("read_packets", ch=None, protocol=self.protocol,
                       src=[self.ref(src_b[0], None, True)], dst=[self.ref(dst_b[0], None, False)])]
        if name in ("re", "rre", "res", "rres", "repkt", "respkt"):
            if not src_b or not dst_b:
                raise _err("needs src_buff and dst_buff", name, r, tb)
            packets = name in ("repkt", "respkt")
            srcs = [self.ref(s, ctype, packets and i > 0) for i, s in enumerate(src_b)]
            if len(srcs) > LIMITS["max_srcs"]:
                raise _err(f"{len(srcs)} sources; cchan's reductions take at most "
                           f"{LIMITS['max_srcs']}", name, r, tb)
            local = self.ref(dst_b[0], ctype, False)
            remotes = [self.ref(d, ctype, packets, hint(i)) for i, d in enumerate(dst_b[1:])]
            if packets:
                out = [mk("reduce_packets", protocol=self.protocol, src=srcs, dst=[local])]
                if name == "respkt":
                    for d in remotes:
                        out += [{"op": "sync"}, mk("put_packets", ch=d["ch"],
                                                   protocol=self.protocol,
                                                   src=[dict(local)], dst=[d])]
                return out
            if name in ("re", "rre") or not remotes:
                return [mk("reduce", src=srcs, dst=[local])]
            # reduce-send: the first remote output in one cchan reduce_put (which keeps the
            # local result too), the others copied from that result after a block sync.
            out = [mk("reduce_put", ch=remotes[0]["ch"], src=srcs, dst=[remotes[0], local])]
            for d in remotes[1:]:
                out += [{"op": "sync"}, mk("put", ch=d["ch"], src=[dict(local)], dst=[d])]
            return out
        raise _err("unknown MSCCL++ operation", name, r, tb)

    def resolve_packet_readers(self):
        """cchan's read_packets names the channel whose peer writes the packets: the rank whose
        put_packets reach that scratch area."""
        writers = {}
        for rk in self.ranks:
            for t in rk["threadblocks"]:
                for o in t["ops"]:
                    if o["op"] == "put_packets":
                        d = o["dst"][0]
                        c = rk["channels"][d["ch"]]
                        for k in range(d["chunk"], d["chunk"] + d["count"]):
                            writers.setdefault((c["peer"], k), set()).add(
                                (rk["rank"], c["index"]))
        for rk in self.ranks:
            for t in rk["threadblocks"]:
                for o in t["ops"]:
                    if o["op"] != "read_packets" or o["ch"] is not None:
                        continue
                    s = o["src"][0]
                    who = set()
                    for k in range(s["chunk"], s["chunk"] + s["count"]):
                        who |= writers.get((rk["rank"], k), set())
                    if len(who) != 1:
                        raise _err(f"reads packets of scratch[{s['chunk']}:"
                                   f"{s['chunk'] + s['count']}], which "
                                   f"{'no put_packets writes' if not who else 'several ranks write'}"
                                   f": cchan's read_packets names one writer's channel", "upkt",
                                   rk["rank"], t["id"])
                    (w, idx), = who
                    o["ch"] = next(i for i, c in enumerate(rk["channels"])
                                   if c["type"] == "memory" and c["peer"] == w and
                                   c["index"] == idx)
            rk.pop("_flat")
            rk.pop("_remote")


SIGNAL_FIRST = {"signal", "sem_release"}  # cchan ops that synchronize the block before acting


def _tidy(ops, chans):
    """MSCCL++ spells block synchronization out as nops, cchan folds it into its ops: a memory
    put, sync, signal on one channel is cchan's put_signal; a sync after an op that ends with a
    block sync, or before one that starts with it, is already there."""
    fused = []
    i = 0
    while i < len(ops):
        o = ops[i]
        j = i + 1
        if j < len(ops) and ops[j]["op"] == "sync":
            j += 1
        if (o["op"] == "put" and "tbg_size" not in o and chans[o["ch"]]["type"] == "memory"
                and j < len(ops) and ops[j]["op"] == "signal" and ops[j]["ch"] == o["ch"]):
            fused.append(dict(o, op="put_signal"))
            i = j + 1
            continue
        fused.append(o)
        i += 1
    out = []
    for k, o in enumerate(fused):
        if o["op"] == "sync":
            prev = out[-1]["op"] if out else None
            nxt = fused[k + 1]["op"] if k + 1 < len(fused) else None
            if prev in SYNCING or nxt in SIGNAL_FIRST:
                continue
        out.append(o)
    return out


def import_plan(m, verify=True):
    """The cchan plan of an MSCCL++ execution plan, verified by cchan's verifier (unless
    verify=False). Raises InterchangeError naming the operation that does not map."""
    if not is_mscclpp(m):
        raise _err("not an MSCCL++ execution plan (no 'gpus' list)")
    try:
        doc = _Importer(m).run()
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise _err(f"malformed MSCCL++ plan ({type(e).__name__}: {e})") from None
    if verify:
        compiler.verify_plan(doc)
    return doc
