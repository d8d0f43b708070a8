"""The pass pipeline: program -> checked, verified plan document."""
import copy

from . import check, deps, fusion, instances, lower, schema, simulate, verify
from .ir import has_loops


# A loop's iteration count depends on the message size. The static checks count loop bodies
# apart (exact for every count); the simulated run and the postcondition are checked at 1, 2 and
# 3 iterations: a body that pairs its signals, slots or packets by iteration parity, or that
# runs differently on the first or last iteration, shows up within them.
LOOP_ITERS = (1, 2, 3)


def check_ir(ir):
    """Static checks, then the simulated schedule and the postcondition at each LOOP_ITERS."""
    check.check(ir)
    deps.check_syncs(ir)
    for iters in (LOOP_ITERS if has_loops(ir) else (1,)):
        trace = simulate.simulate(ir, iters)
        verify.verify(ir, trace, iters)
    return ir


def compile_ir(ir, ninstances=1):
    ir = copy.deepcopy(ir)
    ir = instances.replicate(ir, ninstances)
    ir = fusion.fuse(ir)
    ir = deps.insert_syncs(ir)
    for r, need in zip(ir.ranks, lower.scratch_chunks(ir)):
        r.scratch_chunks = need
    check_ir(ir)
    return ir


def compile_program(prog):
    ir = compile_ir(prog.ir(), prog.instances)
    doc = lower.to_plan(ir)
    schema.validate_plan(doc)
    return doc


def verify_plan(doc):
    """Checks a plan document: schema, then every check on its IR. Returns the IR."""
    schema.validate_plan(doc)
    return check_ir(lower.from_plan(doc))
