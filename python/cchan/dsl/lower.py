"""Pass: lowering. Compiler IR <-> the plan document (docs/plan-format.md)."""
from . import collectives
from .ir import Channel, Op, PlanIR, RankIR
from .vocabulary import FORMAT, REDUCE_OPS, VERSION


def scratch_chunks(ir):
    """Scratch chunks each rank needs: every scratch ref counts on the rank whose memory it is."""
    need = [0] * ir.nranks
    for rank, _, ops in ir.blocks():
        chans = ir.ranks[rank].channels
        for op in ops:
            for ref in op.src + op.dst:
                if ref.buf != "scratch":
                    continue
                end = ref.chunks()[-1] + 1
                if op.name in ("switch_reduce", "switch_broadcast") and ref.ch is None:
                    owners = chans[op.ch].peers
                elif ref.ch is not None:
                    owners = [chans[ref.ch].peer]
                else:
                    owners = [rank]
                for o in owners:
                    need[o] = max(need[o], end)
    return need


def _ops_json(ops):
    out, i = [], 0
    while i < len(ops):
        op = ops[i]
        if op.loop is None:
            out.append(op.to_json())
            i += 1
            continue
        j = i
        while j < len(ops) and ops[j].loop == op.loop:
            j += 1
        out.append({"op": "loop", "body": j - i})
        out.extend(o.to_json() for o in ops[i:j])
        i = j
    return out


def to_plan(ir):
    c = ir.collective
    packets = ir.uses_packets()
    need = scratch_chunks(ir)
    doc = {
        "format": FORMAT, "version": VERSION, "name": ir.name, "collective": c.kind,
        "nranks": ir.nranks,
    }
    if c.kind == "broadcast":
        doc["root"] = c.root
    doc.update({
        "protocol": ir.protocol, "inplace": ir.inplace, "reduce_op": REDUCE_OPS[0],
        "min_bytes": ir.min_bytes, "max_bytes": ir.max_bytes, "align": ir.align,
        "granularity": c.in_chunks * ir.align, "loop_unit": ir.loop_unit,
        "buffers": {"input": c.in_chunks, "output": c.out_chunks, "scratch": max(need)},
        "scratch_chunk_factor": 2 if packets else 1, "ll_double_buffer": packets,
    })
    if c.kind == "custom":
        if c._post is not None:
            doc["postcondition"] = collectives.post_table(c)
        if c._pre is not None:
            doc["precondition"] = collectives.pre_table(c)
    doc["ranks"] = []
    for r in ir.ranks:
        ntb = 1 + max(r.tbs, default=-1)
        doc["ranks"].append({
            "rank": r.rank, "scratch_chunks": need[r.rank], "semaphores": r.semaphores,
            "channels": [ch.to_json() for ch in r.channels],
            "threadblocks": [{"id": t, "ops": _ops_json(r.tbs.get(t, []))} for t in range(ntb)],
        })
    return doc


def from_plan(doc):
    """The IR of a plan document (already schema-valid). Loop markers become loop ids."""
    b = doc["buffers"]
    coll = collectives.from_plan(doc["collective"], doc["nranks"], b["input"], b["output"],
                                 doc.get("root"), doc.get("postcondition"),
                                 doc.get("precondition"))
    ranks, loop_id = [], 0
    for rd in doc["ranks"]:
        r = RankIR(rd["rank"], [Channel.from_json(c) for c in rd["channels"]], rd["semaphores"],
                   rd["scratch_chunks"])
        for t in rd["threadblocks"]:
            ops, left, cur = [], 0, None
            for od in t["ops"]:
                if od["op"] == "loop":
                    left, cur = od["body"], loop_id
                    loop_id += 1
                    continue
                ops.append(Op.from_json(od, cur if left > 0 else None))
                left -= 1
            r.tbs[t["id"]] = ops
        ranks.append(r)
    return PlanIR(doc["name"], coll, doc["protocol"], doc["inplace"], ranks, doc["min_bytes"],
                  doc["max_bytes"], doc["align"], doc["loop_unit"])
