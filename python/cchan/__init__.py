"""cchan: Python interfaces to the cchan GPU communication SDK.

Subpackages:
    cchan.dsl  the algorithm DSL and plan compiler (pure Python, standard library only).

The tensor API: communicators, memory peers map, collectives and MoE dispatch/combine on PyTorch
tensors, over the cchan C libraries through ctypes (nothing compiled at install).

    import cchan
    comm = cchan.Comm()                        # from torchrun / Open MPI / Slurm / cchan-run
    y = comm.all_reduce(x)                     # x: f32/f16/bf16 tensor on comm.device
    buf = cchan.moe.Buffer(comm, low_latency_mode=True)

The tensor API imports torch and loads the libraries on first use, so `import cchan.dsl` (the
execution-plan DSL, pure Python) works without either.
"""

import importlib

__version__ = "0.1.0"

# name -> (submodule, attribute or None for the module itself)
_LAZY = {
    "Comm": ("comm", "Comm"),
    "unique_id": ("comm", "unique_id"),
    "empty": ("memory", "empty"),
    "register": ("memory", "register"),
    "peer_pointers": ("memory", "peer_pointers"),
    "peer_tensor": ("memory", "peer_tensor"),
    "Registration": ("memory", "Registration"),
    "Collectives": ("coll", "Collectives"),
    "CustomAllreduce": ("coll", "CustomAllreduce"),
    "Plan": ("plan", "Plan"),
    "plan_available": ("plan", "available"),
    "plan_unavailable_reason": ("plan", "unavailable_reason"),
    "CchanError": ("_lib", "CchanError"),
    "ClosedError": ("_torch", "ClosedError"),
    "library_paths": ("_lib", "library_paths"),
    "moe": ("moe", None),
    "coll": ("coll", None),
    "distributed": ("distributed", None),
    "memory": ("memory", None),
    "plan": ("plan", None),
    "dsl": ("dsl", None),
}


def __getattr__(name):
    if name in _LAZY:
        mod, attr = _LAZY[name]
        m = importlib.import_module(f"{__name__}.{mod}")
        value = m if attr is None else getattr(m, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cchan' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))


__all__ = sorted(_LAZY)
