"""Reading a plan: a per-rank, per-block listing, and the dependency picture as Graphviz dot."""
from collections import defaultdict

from .ir import SIGNALS, unroll


def listing(ir, doc=None):
    c = ir.collective
    out = [f"plan {ir.name}: {c.kind} over {ir.nranks} ranks, protocol {ir.protocol}"
           f"{', in place' if ir.inplace else ''}; chunks input {c.in_chunks}, output "
           f"{c.out_chunks}" + (f"; loop unit {ir.loop_unit} B" if ir.loop_unit else "")]
    for r in ir.ranks:
        out.append(f"rank {r.rank}: {len(r.tbs)} thread blocks, {r.semaphores} semaphores, "
                   f"{r.scratch_chunks} scratch chunks")
        for i, ch in enumerate(r.channels):
            extra = f" -> peer's {', '.join(sorted(ch.remote_buffers))}" if ch.remote_buffers \
                else ""
            out.append(f"  ch{i}: {ch}{extra}")
        for tb in sorted(r.tbs):
            out.append(f"  tb {tb}:")
            loop = None
            for i, op in enumerate(r.tbs[tb]):
                if op.loop is not None and op.loop != loop:
                    n = sum(1 for o in r.tbs[tb] if o.loop == op.loop)
                    out.append(f"      loop ({n} ops, once per {ir.loop_unit} B slice of every "
                               f"chunk):")
                loop = op.loop
                pad = "    " if op.loop is not None else ""
                text = f"    {i:3d}  {pad}{op}"
                loc = op.loc() or ""
                out.append(f"{text:<78} {loc}".rstrip())
    return "\n".join(out) + "\n"


def _node(rank, tb, i):
    return f"r{rank}_t{tb}_{i}"


def dot(ir):
    """Nodes: operations, clustered by rank and block. Edges: program order (grey), signal ->
    wait, release -> acquire, packets -> packet reads (bold)."""
    lines = ["digraph plan {", "  rankdir=TB; node [shape=box, fontsize=9, fontname=monospace];",
             f'  label="{ir.name}: {ir.collective.kind}, {ir.nranks} ranks"; labelloc=t;']
    for r in ir.ranks:
        lines.append(f"  subgraph cluster_r{r.rank} {{ label=\"rank {r.rank}\"; style=rounded;")
        for tb in sorted(r.tbs):
            lines.append(f"    subgraph cluster_r{r.rank}_t{tb} {{ label=\"tb {tb}\";")
            ops = r.tbs[tb]
            for i, op in enumerate(ops):
                label = str(op).replace('"', "'")
                if op.loc():
                    label += f"\\n{op.loc()}"
                shape = ", style=dashed" if op.loop is not None else ""
                lines.append(f'      {_node(r.rank, tb, i)} [label="{label}"{shape}];')
            for i in range(1, len(ops)):
                lines.append(f"      {_node(r.rank, tb, i - 1)} -> {_node(r.rank, tb, i)} "
                             f"[color=grey];")
            lines.append("    }")
        lines.append("  }")
    lines.extend(_sync_edges(ir))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _sync_edges(ir):
    sends, waits = defaultdict(list), defaultdict(list)
    rel, acq = defaultdict(list), defaultdict(list)
    pk_w, pk_r = {}, []
    for rank, tb, ops in ir.blocks():
        chans = ir.ranks[rank].channels
        for i, op in enumerate(ops):
            node = _node(rank, tb, i)
            if op.name in SIGNALS:
                c = chans[op.ch]
                back = next(j for j, b in enumerate(ir.ranks[c.peer].channels)
                            if b.type == c.type and b.peer == rank and b.index == c.index)
                sends[(c.peer, back)].append(node)
            elif op.name == "wait":
                waits[(rank, op.ch)].append(node)
            elif op.name == "sem_release":
                rel[(rank, op.sem)].append(node)
            elif op.name == "sem_acquire":
                acq[(rank, op.sem)].append(node)
            elif op.name == "put_packets":
                for ref in op.dst:
                    for c in ref.chunks():
                        pk_w[(chans[ref.ch].peer, c)] = node
            if op.name in ("read_packets", "reduce_packets"):
                refs = op.src if op.name == "read_packets" else op.src[1:]
                pk_r.extend(((rank, c), node) for ref in refs for c in ref.chunks())
    out = []
    for key, ws in waits.items():
        for s, w in zip(sends.get(key, []), ws):
            out.append(f"  {s} -> {w} [color=blue, penwidth=2];")
    for key, ws in acq.items():
        for s, w in zip(rel.get(key, []), ws):
            out.append(f"  {s} -> {w} [color=darkgreen, penwidth=2];")
    for key, node in pk_r:
        if key in pk_w:
            out.append(f"  {pk_w[key]} -> {node} [color=orange, penwidth=2];")
    return out
