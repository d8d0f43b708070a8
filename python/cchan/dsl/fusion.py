"""Pass: operation fusion within each thread block (before dependence analysis).

  put + put (same channel, both ranges contiguous and adjacent)  -> one put   (also put_packets)
  reduce D <- S  then  put(ch, D -> X) on a memory channel        -> reduce_put(ch, X <- S) and a
                                                                    local store of the sum into D
  put + signal (same channel)                                      -> put_signal
  put_signal + flush (same port channel)                           -> put_signal_flush
Only adjacent operations of the same loop (or both outside loops) fuse, so nothing runs between
them that could observe the difference.
"""
from .ir import Ref


def _adjacent(a, b):
    return (a.buf == b.buf and a.ch == b.ch and a.stride == 1 and b.stride == 1
            and a.chunk + a.count == b.chunk)


def _merge_puts(a, b):
    if (a.name == b.name and a.name in ("put", "put_packets") and a.ch == b.ch
            and a.protocol == b.protocol and a.tbg_size == 1 and b.tbg_size == 1
            and _adjacent(a.src[0], b.src[0]) and _adjacent(a.dst[0], b.dst[0])):
        s, d = a.src[0], a.dst[0]
        a.src = [Ref(s.buf, s.chunk, s.count + b.src[0].count, 1, s.ch)]
        a.dst = [Ref(d.buf, d.chunk, d.count + b.dst[0].count, 1, d.ch)]
        return a
    return None


def _reduce_put(a, b, channels):
    if (a.name == "reduce" and b.name == "put" and channels[b.ch].type == "memory"
            and a.tbg_size == 1 and b.tbg_size == 1 and len(a.dst) == 1
            and a.dst[0] == b.src[0]):
        a.name, a.ch = "reduce_put", b.ch
        a.dst = [b.dst[0], a.dst[0]]
        return a
    return None


def _put_signal(a, b, channels):
    if a.name == "put" and b.name == "signal" and a.ch == b.ch and a.tbg_size == 1:
        a.name = "put_signal"
        return a
    if (a.name == "put_signal" and b.name == "flush" and a.ch == b.ch
            and channels[a.ch].type == "port"):
        a.name = "put_signal_flush"
        return a
    return None


def _fuse_list(ops, rule):
    out = []
    for op in ops:
        if out and out[-1].loop == op.loop:
            fused = rule(out[-1], op)
            if fused is not None:
                out[-1] = fused
                continue
        out.append(op)
    return out


def fuse(ir):
    for r in ir.ranks:
        for tb, ops in r.tbs.items():
            ops = _fuse_list(ops, _merge_puts)
            ops = _fuse_list(ops, lambda a, b: _reduce_put(a, b, r.channels))
            ops = _fuse_list(ops, lambda a, b: _put_signal(a, b, r.channels))
            r.tbs[tb] = ops
    return ir
