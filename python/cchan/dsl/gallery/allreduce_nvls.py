"""AllReduce on switch channels (NVLS), zero-copy: rank r has the switch sum chunk r of every
rank's input (a switch channel over the inputs) and store the sum into chunk r of every rank's
output (one over the outputs), with a barrier before (every input is ready) and after (every
output is written). The pipelined variant runs reduce and broadcast over successive `loop_unit`
slices on `blocks` thread blocks, each on its part of the chunk; block 0 meets the other ranks and
semaphores pass that on to the other blocks. Compile and verify only: the executor refuses
switch channels."""
import contextlib

from cchan.dsl import AllReduce, Program

VARIANTS = {"allreduce_nvls_zc": {"pipelined": False},
            "allreduce_nvls_pipelined": {"pipelined": True}}
RANKS = (2, 4, 8)


def program(nranks, pipelined=False, blocks=4, loop_unit=1 << 20):
    n, k = nranks, blocks if pipelined else 1
    prog = Program("allreduce_nvls_" + ("pipelined" if pipelined else "zc"),
                   AllReduce(n, chunks=n * k), loop_unit=loop_unit if pipelined else 0)
    others = range(1, k)
    sw_in = prog.switch_channel(range(n), buffer="input")
    sw_out = prog.switch_channel(range(n), buffer="output", index=1)
    prog.barrier(0)
    for r in range(n):
        start = {b: prog.semaphore(r) for b in others}
        done = {b: prog.semaphore(r) for b in others}
        for b in others:
            start[b].release(0)
            start[b].acquire(b)
        for b in range(k):
            c = r * k + b  # block b's part of chunk r
            with prog.loop() if pipelined else contextlib.nullcontext():
                sw_in.reduce(prog.output(r)[c], c, b)
                sw_out.broadcast(c, prog.output(r)[c], b)
        for b in others:
            done[b].release(b)
            done[b].acquire(0)
    prog.barrier(0)
    return prog

