"""The gallery (docs/dsl.md): published MSCCL++/MSCCLang programs written in cchan's DSL from
their algorithms' descriptions. Not shipped as plans; test/dsl/test_gallery.py compiles and
verifies every entry at its rank counts and runs those the executor can run on the host backend.

ENTRIES: (title, module, variants, host) in the order of docs/dsl.md; module is a shipped
algorithm (cchan.dsl.algorithms) where one already is the program, else a gallery module; host
is False where the executor cannot run the plan (switch channels; custom collectives, whose
results the exec tests have no reference for)."""
ENTRIES = [
    ("LL all-pairs AllReduce", "cchan.dsl.algorithms.allreduce_1pa", ["allreduce_1pa_ll"], True),
    ("read-reduce AllReduce", "cchan.dsl.algorithms.allreduce_2pa", ["allreduce_2pa_zc"], True),
    ("ring AllGather, parallel channels", "cchan.dsl.gallery.allgather_ring",
     ["allgather_ring_mem", "allgather_ring_port"], True),
    ("ring AllReduce, parallel channels", "cchan.dsl.gallery.allreduce_ring",
     ["allreduce_ring_mem_x2", "allreduce_ring_port_x2"], True),
    ("two-node ReduceScatter", "cchan.dsl.gallery.reducescatter_2node", ["reducescatter_2node"],
     True),
    ("pipelined AllToAll", "cchan.dsl.gallery.alltoall_pipeline", ["alltoall_pipeline"], True),
    ("thread-block-group AllGather", "cchan.dsl.gallery.allgather_tbg", ["allgather_tbg"], True),
    ("NVLS zero-copy and pipelined AllReduce", "cchan.dsl.gallery.allreduce_nvls",
     ["allreduce_nvls_zc", "allreduce_nvls_pipelined"], False),
    ("send/recv", "cchan.dsl.gallery.sendrecv", ["sendrecv_mem", "sendrecv_port"], False),
    ("two-node LL AllReduce", "cchan.dsl.gallery.allreduce_2node_ll", ["allreduce_2node_ll"],
     True),
]
