"""The pass pipeline: program -> checked, verified plan document."""
import copy

from . import check, deps, fusion, instances, lower, schema, simulate, verify
from .ir import has_loops


def check_ir(ir):
    """Static checks, simulated schedule and postcondition; loops unrolled twice."""
    iters = 2 if has_loops(ir) else 1
    check.check(ir, iters)
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
