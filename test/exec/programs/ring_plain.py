"""The ring ReduceScatter without the halves' overlap (the plain ring): the shipped ring program
(cchan.dsl.algorithms.ring) with every chunk whole, so each step waits for its whole chunk before
adding it and sending it on. For measuring the overlap against it in one bench run
(cchan-coll-bench --plan overlapped --plan plain)."""
from cchan.dsl.algorithms import ring

VARIANTS = {"reducescatter_ring_plain_mem": {"channel": "memory"},
            "reducescatter_ring_plain_port": {"channel": "port"}}
RANKS = (2, 4, 8)


def program(nranks, channel="memory"):
    halves = ring.HALVES
    ring.HALVES = 1
    try:
        prog = ring.program(nranks, collective="reducescatter", channel=channel)
    finally:
        ring.HALVES = halves
    prog.name = "reducescatter_ring_plain_" + ("mem" if channel == "memory" else "port")
    return prog
