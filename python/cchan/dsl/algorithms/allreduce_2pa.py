"""AllReduce, two phases, all pairs, on memory channels (2PA).

The input is cut into N chunks; rank r owns chunk r. Phase 1 (ReduceScatter): rank r sums chunk r
of every rank. Phase 2 (AllGather): rank r puts the sum into chunk r of every peer's output.

  zero-copy ("zc"): rank r reads chunk r of every peer's input directly (MemoryChannel.remote) and
                    sums it in registers: no copy into scratch. A handshake first (a peer's input
                    is read only once the peer is in this run).
  through scratch ("scratch"): every rank puts chunk p of its input into slot r of rank p's
                    scratch; rank p sums its slots. Thread block k serves the k-th peer.
"""
from cchan.dsl import AllReduce, Program

VARIANTS = {
    "allreduce_2pa_zc": {"mode": "zc"},
    "allreduce_2pa_scratch": {"mode": "scratch"},
}
RANKS = (2, 4, 8)


def program(nranks, mode="zc"):
    n = nranks
    prog = Program(f"allreduce_2pa_{mode}", AllReduce(n, chunks=n), min_bytes=1 << 14)
    for r in range(n):
        peers = [(r + k) % n for k in range(1, n)]
        chans = {p: prog.memory_channel(r, p) for p in peers}
        out = prog.output(r)
        if mode == "zc":
            for p in peers:
                chans[p].signal(0)
            for p in peers:
                chans[p].wait(0)
            srcs = [prog.input(r)[r]] + [chans[p].remote(prog.input(p)[r]) for p in peers]
            prog.reduce(out[r], srcs, tb=0)
            for p in peers:
                chans[p].put(prog.output(p)[r], out[r], tb=0)
            for p in peers:
                chans[p].signal(0)
            for p in peers:
                chans[p].wait(0)
        else:
            for tb, p in enumerate(peers):
                ch = chans[p]
                ch.signal(tb)
                ch.wait(tb)
                ch.put(prog.scratch(p)[r], prog.input(r)[p], tb)
                ch.signal(tb)
                ch.wait(tb)
            # Block 0 sums once every block has seen its peer's chunk arrive, then lets each
            # block put the sum to its peer (semaphores pipeline the blocks).
            arrived = {tb: prog.semaphore(r) for tb in range(1, len(peers))}
            summed = {tb: prog.semaphore(r) for tb in range(1, len(peers))}
            for tb in arrived:
                arrived[tb].release(tb)
                arrived[tb].acquire(0)
            prog.reduce(out[r], [prog.input(r)[r]] + [prog.scratch(r)[p] for p in peers], tb=0)
            for tb in summed:
                summed[tb].release(0)
                summed[tb].acquire(tb)
            for tb, p in enumerate(peers):
                chans[p].put(prog.output(p)[r], out[r], tb)
                chans[p].signal(tb)
                chans[p].wait(tb)
    return prog
