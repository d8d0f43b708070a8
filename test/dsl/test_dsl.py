"""Tests of the DSL compiler: shipped programs, plan schema and round trip, rejections, CLI.

Run: PYTHONPATH=python /usr/bin/python3 -m unittest discover -s test/dsl -v
"""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest
import unittest.mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)

import broken  # noqa: E402
from cchan.dsl import (AllGather, AllReduce, AllToAll, ChunkRangeError, Custom,  # noqa: E402
                       DeadlockError, DslError, MissingSignalError, PlanFormatError,
                       PostconditionError, Program, RaceError, TBGroup, UnknownChannelError,
                       UnknownPeerError)
from cchan.dsl import __main__ as cli  # noqa: E402
from cchan.dsl import compiler, lower, plans, schema, show  # noqa: E402

BROKEN = os.path.join(HERE, "broken.py")


class SchemaValidator(unittest.TestCase):
    S = {"type": "object", "required": ["a"], "additionalProperties": False,
         "properties": {"a": {"type": "integer", "minimum": 1, "maximum": 3},
                        "b": {"type": "array", "items": {"$ref": "#/$defs/e"}}},
         "$defs": {"e": {"type": "string", "enum": ["x", "y"]}}}

    def test_valid(self):
        self.assertEqual(schema.errors({"a": 2, "b": ["x", "y"]}, self.S), [])

    def test_each_keyword(self):
        cases = [([], "expected object"), ({}, "missing required field 'a'"),
                 ({"a": 0}, "below the minimum"), ({"a": 4}, "above the maximum"),
                 ({"a": True}, "expected integer"), ({"a": 1, "c": 1}, "unknown field 'c'"),
                 ({"a": 1, "b": ["z"]}, "is not one of"), ({"a": 1, "b": "x"}, "expected array")]
        for value, text in cases:
            errs = schema.errors(value, self.S)
            self.assertTrue(any(text in e for e in errs), (value, errs))

    def test_plan_schema_rejects(self):
        doc = AllGatherProgram.build(2).compile()
        doc["ranks"][0]["threadblocks"][0]["ops"][0]["op"] = "teleport"
        with self.assertRaises(PlanFormatError) as cm:
            schema.validate_plan(doc)
        self.assertIn("teleport", str(cm.exception))


class AllGatherProgram:
    @staticmethod
    def build(n):
        from cchan.dsl.algorithms import allgather_allpairs
        return allgather_allpairs.program(n)


class ShippedPrograms(unittest.TestCase):
    def test_every_program_compiles_verifies_and_round_trips(self):
        seen = set()
        for mod, name, options, n in plans.shipped():
            with self.subTest(plan=name, nranks=n):
                doc = mod.program(n, **options).compile()
                self.assertEqual(schema.errors(doc, schema.plan_schema()), [])
                ir = compiler.verify_plan(json.loads(json.dumps(doc)))
                self.assertEqual(lower.to_plan(ir), doc)  # plan -> IR -> plan is the identity
                seen.add((name, n))
        names = {name for name, _ in seen}
        for n in (2, 4, 8):
            for name in names:
                self.assertIn((name, n), seen)

    def test_shipped_plans_are_fresh(self):
        with tempfile.TemporaryDirectory() as tmp:
            names = plans.write_all(tmp)
            shipped = sorted(f for f in os.listdir(os.path.join(ROOT, "plans"))
                             if f.endswith(".json"))
            self.assertEqual(sorted(names), shipped,
                             "plans/ differs from the shipped programs: run `make plans`")
            for fn in names:
                with open(os.path.join(tmp, fn)) as a, \
                        open(os.path.join(ROOT, "plans", fn)) as b:
                    self.assertEqual(a.read(), b.read(), f"plans/{fn} is stale: run `make plans`")


class Rejections(unittest.TestCase):
    """Each broken program is rejected with its class of error, naming the op and the line."""

    def expect(self, cls, build, name=None, compile=True):
        broken.expected = None
        line = None
        try:
            prog, line = build()
            if compile:
                prog.compile()
        except cls as e:
            text = str(e)
            line = line if line is not None else broken.expected
            lines = line if isinstance(line, list) else [line]
            self.assertTrue(any(f"{BROKEN}:{ln}:" in text for ln in lines),
                            f"{cls.__name__} does not name line {lines}: {text}")
            if name:
                self.assertIn(name, text)
            self.assertIn("rank", text)
            return text
        else:
            self.fail(f"{build.__name__}: no {cls.__name__}")

    def test_missing_signal(self):
        self.expect(MissingSignalError, broken.missing_signal, "wait")

    def test_race_read_before_signal(self):
        self.expect(RaceError, broken.race_read_before_signal, "put")

    def test_race_no_handshake(self):
        self.expect(RaceError, broken.race_no_handshake, "caller")

    def test_race_two_writers(self):
        self.expect(RaceError, broken.race_two_writers, "also writes")

    def test_deadlock(self):
        self.expect(DeadlockError, broken.deadlock, "never comes")

    def test_cyclic_waits(self):
        self.expect(DeadlockError, broken.cyclic_waits, "2 thread block(s) waiting")

    def test_wrong_postcondition(self):
        self.expect(PostconditionError, broken.wrong_postcondition, "must be")

    def test_chunk_out_of_range(self):
        self.expect(ChunkRangeError, broken.chunk_out_of_range, "outside input")

    def test_unknown_peer(self):
        self.expect(UnknownPeerError, broken.unknown_peer, "rank 4")

    def test_unknown_channel(self):
        self.expect(UnknownChannelError, broken.unknown_channel, "connects rank 0 to rank 1")

    def test_port_put_not_flushed(self):
        self.expect(RaceError, broken.port_not_flushed, "flush")


class PlanChecks(unittest.TestCase):
    """verify on plan documents: what a hand-edited or foreign plan gets wrong."""

    def plan(self):
        return AllGatherProgram.build(2).compile()

    def test_unknown_channel_index(self):
        doc = self.plan()
        doc["ranks"][0]["threadblocks"][0]["ops"][0]["ch"] = 7
        with self.assertRaises(UnknownChannelError) as cm:
            compiler.verify_plan(doc)
        self.assertIn("allgather_allpairs.py:", str(cm.exception))

    def test_unknown_peer(self):
        doc = self.plan()
        doc["ranks"][0]["channels"][0]["peer"] = 5
        with self.assertRaises(UnknownPeerError):
            compiler.verify_plan(doc)

    def test_chunk_range(self):
        doc = self.plan()
        op = doc["ranks"][0]["threadblocks"][0]["ops"][2]
        op["dst"][0]["chunk"] = 2
        with self.assertRaises(ChunkRangeError):
            compiler.verify_plan(doc)

    def test_dropped_wait(self):
        doc = self.plan()
        del doc["ranks"][1]["threadblocks"][0]["ops"][-2]
        with self.assertRaises(DslError):
            compiler.verify_plan(doc)


def _strip_syncs(doc):
    """The plan without its block-level syncs (loop bodies shortened to match)."""
    n = 0
    for r in doc["ranks"]:
        for t in r["threadblocks"]:
            out, loop = [], None
            for o in t["ops"]:
                if o["op"] == "loop":
                    loop = dict(o)
                    out.append(loop)
                    left = o["body"]
                    continue
                inside = loop is not None and left > 0
                left = left - 1 if loop is not None else 0
                if o["op"] == "sync":
                    n += 1
                    if inside:
                        loop["body"] -= 1
                    continue
                out.append(o)
            t["ops"] = out
    return n


class VerifierHoles(unittest.TestCase):
    """Programs and plans the verifier got wrong, each with the answer it must give."""

    def test_group_put_packets(self):
        # MSCCL++'s multi-node LL AllReduce: a group of blocks writes one packet area, each
        # block its share of the range.
        prog = Program("g", AllReduce(2), protocol="ll16")
        for r in range(2):
            ch = prog.memory_channel(r, 1 - r)
            ch.put_packets(prog.scratch(1 - r)[0], prog.input(r)[0], TBGroup([0, 1]))
            prog.reduce_packets(prog.output(r)[0], [prog.input(r)[0], prog.scratch(r)[0]],
                                TBGroup([0, 1]))
        doc = prog.compile()
        compiler.verify_plan(doc)
        # the same group writing the area again is still a second write
        prog = Program("g", AllReduce(2), protocol="ll16")
        for r in range(2):
            ch = prog.memory_channel(r, 1 - r)
            for _ in range(2):
                ch.put_packets(prog.scratch(1 - r)[0], prog.input(r)[0], TBGroup([0, 1]))
            prog.reduce_packets(prog.output(r)[0], [prog.input(r)[0], prog.scratch(r)[0]],
                                TBGroup([0, 1]))
        with self.assertRaisesRegex(RaceError, "second time"):
            prog.compile()

    def test_loop_balance_at_every_iteration_count(self):
        # 2 signals outside any loop, 1 wait per iteration: in step only at 2 iterations.
        prog = Program("l", Custom(2, 1, 1, None), loop_unit=1 << 20)
        a, b = prog.memory_channel(0, 1), prog.memory_channel(1, 0)
        a.signal(0)
        a.signal(0)
        with prog.loop():
            line = sys._getframe().f_lineno + 1
            b.wait(0)
        with self.assertRaises(MissingSignalError) as cm:
            prog.compile()
        self.assertIn(f"{__file__}:{line}:", str(cm.exception))
        self.assertIn("per loop iteration", str(cm.exception))

    def test_loop_run_checked_at_one_and_three_iterations(self):
        from cchan.dsl import simulate
        from cchan.dsl.algorithms import ring
        seen = []
        real = simulate.simulate
        with unittest.mock.patch.object(simulate, "simulate",
                                        lambda ir, iters=1: seen.append(iters) or real(ir, iters)):
            ring.program(4).compile()
        self.assertEqual(seen, [1, 2, 3])

    def test_verify_checks_block_syncs(self):
        with open(os.path.join(ROOT, "plans", "reducescatter_ring_port.n4.json")) as f:
            doc = json.load(f)
        compiler.verify_plan(json.loads(json.dumps(doc)))
        self.assertGreater(_strip_syncs(doc), 0)
        with self.assertRaisesRegex(RaceError, "sync is missing"):
            compiler.verify_plan(doc)

    def test_out_of_place_input_is_read_only(self):
        from cchan.dsl import InputWriteError
        prog = Program("w", AllReduce(2))
        for r in range(2):
            ch = prog.memory_channel(r, 1 - r)
            ch.signal(0)
            ch.wait(0)
            ch.put(prog.scratch(1 - r)[0], prog.input(r)[0], 0)
            ch.signal(0)
            ch.wait(0)
            line = sys._getframe().f_lineno + 1
            prog.reduce(prog.input(r)[0], [prog.input(r)[0], prog.scratch(r)[0]], 0)
            prog.copy(prog.output(r)[0], prog.input(r)[0], 0)
        with self.assertRaises(InputWriteError) as cm:
            prog.compile()
        self.assertIn(f"{__file__}:{line}:", str(cm.exception))
        self.assertIn("read-only", str(cm.exception))

    def _pairs(self, n, barrier):
        """Ranks 2k and 2k+1 swap their input; rank n-1 alone when n is odd (a copy)."""
        def post(r, c):
            return {(c, 0): 1} if c == r or (c == r ^ 1 and c < n) else None
        prog = Program("pairs", Custom(n, 1, n, post))
        for r in range(n):
            prog.copy(prog.output(r)[r], prog.input(r)[0], 0)
        for r in range(0, n - 1, 2):
            barrier(prog, [r, r + 1])
        for r in range(n - n % 2):
            prog.memory_channel(r, r ^ 1).put(prog.output(r ^ 1)[r], prog.input(r)[0], 0)
        for r in range(0, n - 1, 2):
            barrier(prog, [r, r + 1])
        return prog

    def test_subset_barrier(self):
        doc = self._pairs(3, lambda prog, ranks: prog.barrier(0, ranks=ranks)).compile()
        ops = [[o["op"] for o in r["threadblocks"][0]["ops"]] for r in doc["ranks"]]
        self.assertEqual(ops[2], ["copy"])  # rank 2 is not held up by the pair's barriers
        self.assertEqual(ops[0], ["copy", "signal", "wait", "put", "signal", "wait"])
        self.assertNotIn("barrier", json.dumps(doc))
        compiler.verify_plan(doc)
        # a barrier over every rank stays the plan's barrier
        doc = self._pairs(2, lambda prog, ranks: prog.barrier(0)).compile()
        self.assertEqual([o["op"] for o in doc["ranks"][0]["threadblocks"][0]["ops"]],
                         ["copy", "barrier", "put", "barrier"])

    def test_subset_barrier_orders_only_its_members(self):
        # Rank 2 reads rank 0's output after a barrier of ranks 0 and 1 only: a race.
        prog = Program("b", Custom(3, 1, 3, lambda r, c: None))
        ch20 = prog.memory_channel(2, 0)
        ch02 = prog.memory_channel(0, 2)
        ch02.signal(1)
        ch20.wait(1)
        prog.copy(prog.output(0)[0], prog.input(0)[0], 0)
        prog.barrier(0, ranks=[0, 1])
        ch20.get(prog.output(2)[0], prog.output(0)[0], 1)
        ch20.signal(1)
        ch02.wait(1)
        with self.assertRaisesRegex(RaceError, "output\\[0\\] of rank 0"):
            prog.compile()

    def test_executor_limits_at_compile_time(self):
        from cchan.dsl import ExecutorLimitError
        from cchan.dsl.vocabulary import LIMITS
        n = LIMITS["max_channels"] + 1
        prog = Program("many", Custom(2, 1, 1, None))
        for i in range(n):
            for r in range(2):
                prog.memory_channel(r, 1 - r, index=i).signal(0)
            for r in range(2):
                prog.memory_channel(r, 1 - r, index=i).wait(0)
        with self.assertRaisesRegex(ExecutorLimitError, f"channels of rank 0: {n}"):
            prog.compile()
        doc = AllGatherProgram.build(2).compile()
        for r in doc["ranks"]:
            r["channels"][0]["index"] = LIMITS["max_channel_index"] + 1
        with self.assertRaisesRegex(ExecutorLimitError, "index"):
            compiler.verify_plan(doc)
        for key, field, value in (("max_blocks", "tbg_size", LIMITS["max_blocks"] + 1),):
            doc = AllGatherProgram.build(2).compile()
            op = doc["ranks"][0]["threadblocks"][0]["ops"][2]
            op["tbg_index"], op[field] = 0, value
            with self.assertRaisesRegex(ExecutorLimitError, key):
                compiler.verify_plan(doc)

    def test_custom_postcondition_is_kept(self):
        post = lambda rank, chunk: {(0, 0): 1} if rank == 1 else None  # noqa: E731
        prog = Program("send", Custom(2, 1, 1, post), instances=2)
        ch, back = prog.memory_channel(0, 1), prog.memory_channel(1, 0)
        back.signal(0)
        ch.wait(0)
        ch.put(prog.output(1)[0], prog.input(0)[0], 0)
        ch.signal(0)
        back.wait(0)
        doc = prog.compile()
        self.assertEqual(doc["postcondition"], [[None, None], [[[0, 0, 1]], [[0, 1, 1]]]])
        ir = compiler.verify_plan(json.loads(json.dumps(doc)))
        self.assertEqual(lower.to_plan(ir), doc)
        doc["postcondition"][1][0] = [[1, 0, 1]]  # rank 1 must now get its own chunk
        with self.assertRaises(PostconditionError):
            compiler.verify_plan(doc)


class Vocabulary(unittest.TestCase):
    """One source for the op set, channel kinds, buffers, protocols, collectives, data types
    and limits: everything made from it or kept beside it is in step."""

    def test_everything_in_step(self):
        from cchan.dsl import vocabulary
        self.assertEqual(vocabulary.drift(), [])

    def test_drift_is_found(self):
        from unittest import mock
        from cchan.dsl import vocabulary
        ops = vocabulary.OP_NAMES + ("teleport",)
        with mock.patch.object(vocabulary, "OP_NAMES", ops):
            text = "\n".join(vocabulary.drift())
        for place in ("plan.schema.json", "enum exec_opcode", "exec_op_names",
                      "the op table"):
            self.assertIn(place, text)
        with mock.patch.dict(vocabulary.LIMITS, {"max_channels": 65, "max_semaphores": 1}):
            text = "\n".join(vocabulary.drift())
        self.assertIn("exec_program.h: EXEC_MAX_CHANNELS", text)
        self.assertIn("exec_plan.c: the loader's max_semaphores", text)
        self.assertIn("the limits table", text)
        with mock.patch.object(vocabulary, "DTYPES", ("f32",)):
            self.assertIn("cchan_exec_dtype", "\n".join(vocabulary.drift()))

    def test_ir_classes_come_from_it(self):
        from cchan.dsl import ir, vocabulary
        self.assertEqual(ir.OP_NAMES, vocabulary.OP_NAMES)
        self.assertEqual(set(ir.CHANNEL_OPS), {o["name"] for o in vocabulary.V["ops"]
                                               if o.get("channels")})
        self.assertEqual(schema.plan_schema()["$defs"]["op"]["properties"]["op"]["enum"],
                         list(vocabulary.OP_NAMES))

    def test_cli(self):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            self.assertEqual(cli.main(["vocab", "--check"]), 0, err.getvalue())
            self.assertEqual(cli.main(["vocab"]), 0)
        self.assertIn("EXEC_OP_PUT_SIGNAL_FLUSH,", out.getvalue())


class Features(unittest.TestCase):
    def test_fusion(self):
        doc = AllGatherProgram.build(2).compile()
        names = [o["op"] for o in doc["ranks"][0]["threadblocks"][0]["ops"]]
        self.assertIn("put_signal", names)
        self.assertNotIn("put", names)

    def test_reduce_put_fusion_and_sync(self):
        prog = Program("t", AllReduce(2, chunks=2))
        for r in range(2):
            ch = prog.memory_channel(r, 1 - r)
            ch.signal(0)
            ch.wait(0)
            prog.reduce(prog.output(r)[r], [prog.input(r)[r], ch.remote(prog.input(1 - r)[r])],
                        0)
            ch.put(prog.output(1 - r)[r], prog.output(r)[r], 0)
            ch.signal(0)
            ch.wait(0)
        ops = prog.compile()["ranks"][0]["threadblocks"][0]["ops"]
        self.assertEqual([o["op"] for o in ops], ["signal", "wait", "reduce_put", "signal", "wait"])
        self.assertEqual(len(ops[2]["dst"]), 2)

    def test_sync_inserted_once(self):
        prog = Program("t", AllReduce(1, chunks=1))
        o, i = prog.output(0), prog.input(0)
        prog.copy(o[0], i[0], 0)
        prog.reduce(o[0], [o[0], i[0]], 0)  # reads what the copy wrote: a sync before it
        prog.copy(o[0], i[0], 0)            # overwrites what reduce wrote: another
        prog.compile()
        ir = compiler.instances.replicate(prog.ir(), 1)
        ir = compiler.deps.insert_syncs(compiler.fusion.fuse(ir))
        names = [op.name for op in ir.ranks[0].tbs[0]]
        self.assertEqual(names, ["copy", "sync", "reduce", "sync", "copy"])

    def test_instances(self):
        from cchan.dsl.algorithms import allgather_allpairs
        prog = allgather_allpairs.program(4)
        prog.instances = 2
        doc = prog.compile()
        self.assertEqual(doc["buffers"]["input"], 2)
        self.assertEqual(len(doc["ranks"][0]["threadblocks"]), 6)
        self.assertEqual(len(doc["ranks"][0]["channels"]), 6)

    def test_custom_collective(self):
        # Rank 1 gets rank 0's chunk 0 (a one-way send), expressed as a custom collective.
        post = lambda rank, chunk: {(0, 0): 1} if rank == 1 else None  # noqa: E731
        prog = Program("send", Custom(2, 1, 1, post))
        ch = prog.memory_channel(0, 1)
        back = prog.memory_channel(1, 0)
        back.signal(0)
        ch.wait(0)
        ch.put(prog.output(1)[0], prog.input(0)[0], 0)
        ch.signal(0)
        back.wait(0)
        prog.compile()
        prog2 = Program("send", Custom(2, 1, 1, lambda r, c: {(1, 0): 1} if r == 1 else None))
        prog2.memory_channel(0, 1)
        with self.assertRaises(PostconditionError):
            prog2.compile()

    def test_switch_allreduce(self):
        n = 4
        prog = Program("sw", AllReduce(n, chunks=n))
        sw_in = prog.switch_channel(range(n), buffer="input")
        sw_out = prog.switch_channel(range(n), buffer="output", index=1)
        prog.barrier(0)
        for r in range(n):
            sw_in.reduce(prog.output(r)[r], r, 0)
            sw_out.broadcast(r, prog.output(r)[r], 0)
        prog.barrier(0)
        doc = prog.compile()
        self.assertEqual([o["op"] for o in doc["ranks"][1]["threadblocks"][0]["ops"]],
                         ["barrier", "switch_reduce", "switch_broadcast", "barrier"])
        # Without the closing barrier a member's run can end while others still broadcast.
        prog2 = Program("sw", AllReduce(n, chunks=n))
        sw_in = prog2.switch_channel(range(n), buffer="input")
        sw_out = prog2.switch_channel(range(n), buffer="output", index=1)
        prog2.barrier(0)
        for r in range(n):
            sw_in.reduce(prog2.output(r)[r], r, 0)
            sw_out.broadcast(r, prog2.output(r)[r], 0)
        with self.assertRaises(RaceError):
            prog2.compile()

    def test_inplace_allgather(self):
        prog = Program("ag_inplace", AllGather(3), inplace=True)
        for r in range(3):
            for tb, p in enumerate([(r + k) % 3 for k in (1, 2)]):
                ch = prog.memory_channel(r, p)
                ch.signal(tb)
                ch.wait(tb)
                ch.put(prog.output(p)[r], prog.input(r)[0], tb)
                ch.signal(tb)
                ch.wait(tb)
        doc = prog.compile()
        self.assertTrue(doc["inplace"])
        self.assertNotIn('"input"', json.dumps(doc["ranks"]))

    def test_inplace_alltoall(self):
        """In place, an AllToAll's input is its output: a chunk may be overwritten only after it
        was sent. Swapping each pair's chunks through scratch verifies; overwriting a chunk with
        what the peer sent before sending it is refused (that chunk's data is gone)."""
        def build(copy_first):
            prog = Program("a2a_inplace", AllToAll(3), inplace=True)
            for r in range(3):
                for tb, p in enumerate([(r + k) % 3 for k in (1, 2)]):
                    ch = prog.memory_channel(r, p)
                    ch.signal(tb)
                    ch.wait(tb)
                    if copy_first:
                        prog.copy(prog.output(r)[p], prog.scratch(r)[p], tb)
                    ch.put(prog.scratch(p)[r], prog.output(r)[p], tb)
                    ch.signal(tb)
                    ch.wait(tb)
                    if not copy_first:
                        prog.copy(prog.output(r)[p], prog.scratch(r)[p], tb)
            return prog
        doc = build(False).compile()
        self.assertTrue(doc["inplace"])
        self.assertNotIn('"input"', json.dumps(doc["ranks"]))
        with self.assertRaises(DslError):
            build(True).compile()

    def test_inplace_reducescatter(self):
        """In place, a ReduceScatter's output is the rank's slice of its input: the plan names no
        output, may write that slice and no other part of the input."""
        from cchan.dsl import InputWriteError, ReduceScatter

        def build(bad_write):
            prog = Program("rs_inplace", ReduceScatter(2), inplace=True)
            for r in range(2):
                p = 1 - r
                ch = prog.memory_channel(r, p)
                ch.signal(0)
                ch.wait(0)
                ch.put(prog.scratch(p)[0], prog.input(r)[p], 0)
                ch.signal(0)
                ch.wait(0)
                dst = prog.input(r)[p] if bad_write else prog.output(r)[0]
                prog.reduce(dst, [prog.input(r)[r], prog.scratch(r)[0]], 0)
            return prog
        doc = build(False).compile()
        self.assertTrue(doc["inplace"])
        self.assertNotIn('"output"', json.dumps(doc["ranks"]))
        with self.assertRaisesRegex(InputWriteError, r"writes input\[1\] of rank 0: .* may "
                                                     r"write only the output inside its input, "
                                                     r"chunks \[0, 1\)"):
            build(True).compile()

    def test_loop_plan_size_independent_of_message(self):
        from cchan.dsl.algorithms import ring
        a = ring.program(4, loop_unit=1 << 16).compile()
        b = ring.program(4, loop_unit=1 << 20).compile()
        self.assertEqual(len(json.dumps(a["ranks"])), len(json.dumps(b["ranks"])))
        ops = a["ranks"][0]["threadblocks"][0]["ops"]
        self.assertEqual(sum(o["op"] == "loop" for o in ops), 1)

    def test_show_and_dot(self):
        doc = AllGatherProgram.build(2).compile()
        ir = lower.from_plan(doc)
        text = show.listing(ir)
        self.assertIn("put_signal ch0 peer(ch0).output[0] <- input[0]", text)
        d = show.dot(ir)
        self.assertTrue(d.startswith("digraph"))
        self.assertIn("color=blue", d)


def _packets_per_member(self, a, op, s):
    """The simulator's old rule: every member of a group writes the whole packet area."""
    if s in self.packets:
        self._race("writes LL packets a second time", a, op)
    self.packets[s] = list(self.vc[a])


class Mutations(unittest.TestCase):
    """Break one check at a time; the rejection tests that cover it must then fail."""

    def run_under(self, target, attr, replacement, tests):
        from unittest import mock
        failed = []
        with mock.patch.object(target, attr, replacement):
            for t in tests:
                case = t[0](t[1])
                result = unittest.TestResult()
                case.run(result)
                if result.failures or result.errors:
                    failed.append(t[1])
        return failed

    def test_each_mutation_is_caught(self):
        from cchan.dsl import check, deps, simulate, verify
        R, P, H = Rejections, PlanChecks, VerifierHoles
        mutations = [
            ("verifier accepts any output", verify.Verifier, "check", lambda self: None,
             [(R, "test_wrong_postcondition")]),
            ("races never reported", simulate.Simulator, "_done", lambda *a: True,
             [(R, "test_race_no_handshake"), (R, "test_race_two_writers")]),
            ("end-of-run check removed", simulate.Simulator, "_check_end", lambda self: None,
             [(R, "test_race_read_before_signal"), (R, "test_port_put_not_flushed")]),
            ("signal/wait balance unchecked", check, "_check_balance", lambda *a: None,
             [(R, "test_missing_signal"),
              (H, "test_loop_balance_at_every_iteration_count")]),
            ("deadlocks ignored", simulate.Simulator, "_report_deadlock", lambda *a: None,
             [(R, "test_deadlock"), (R, "test_cyclic_waits")]),
            ("operation checks removed", check, "_check_op", lambda *a: None,
             [(P, "test_unknown_channel_index"), (P, "test_chunk_range")]),
            ("channel checks removed", check, "_check_channels", lambda *a: None,
             [(P, "test_unknown_peer")]),
            ("executor limits unchecked", check, "_check_limits", lambda *a: None,
             [(H, "test_executor_limits_at_compile_time")]),
            ("block syncs of plans unchecked", deps, "check_syncs", lambda ir: ir,
             [(H, "test_verify_checks_block_syncs")]),
            ("group packets counted per member", simulate.Simulator, "_put_packets",
             _packets_per_member, [(H, "test_group_put_packets")]),
        ]
        for what, target, attr, repl, tests in mutations:
            with self.subTest(mutation=what):
                failed = self.run_under(target, attr, repl, tests)
                self.assertEqual(sorted(failed), sorted(t[1] for t in tests),
                                 f"with '{what}', these tests should fail")


class Cli(unittest.TestCase):
    def run_cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(list(argv))
        return rc, out.getvalue(), err.getvalue()

    def test_compile_verify_show(self):
        prog = os.path.join(ROOT, "python/cchan/dsl/algorithms/allreduce_1pa.py")
        with tempfile.TemporaryDirectory() as tmp:
            plan = os.path.join(tmp, "p.json")
            rc, _, err = self.run_cli("compile", prog, "--nranks", "4", "-o", plan)
            self.assertEqual(rc, 0, err)
            rc, out, _ = self.run_cli("verify", plan)
            self.assertEqual(rc, 0)
            self.assertIn("postcondition holds", out)
            rc, out, _ = self.run_cli("show", plan, "--dot", os.path.join(tmp, "p.dot"))
            self.assertEqual(rc, 0)
            self.assertIn("reduce_packets", out)
            self.assertTrue(os.path.exists(os.path.join(tmp, "p.dot")))

    def test_malformed_input_is_named(self):
        """Every malformed input the command line takes ends with one error line (exit 1), no
        traceback: a plan that breaks the schema (show, verify), text that is not JSON, a program
        that does not exist, an option the program does not take, an option value it chokes on,
        an MSCCL++ plan without its fields."""
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "bad.json")
            with open(bad, "w") as f:
                json.dump({"format": "cchan-plan", "version": 1, "ranks": 3}, f)
            notjson = os.path.join(tmp, "notjson.json")
            with open(notjson, "w") as f:
                f.write("[1, 2")
            foreign = os.path.join(tmp, "m.json")
            with open(foreign, "w") as f:
                json.dump({"gpus": [{"id": 0}], "name": "x"}, f)
            cases = [
                (("show", bad), "PlanFormatError"),
                (("verify", bad), "PlanFormatError"),
                (("show", notjson), "not JSON"),
                (("compile", "nosuch", "--nranks", "4"), "no such program"),
                (("compile", "ring", "--nranks", "4", "--set", "nosuchkey=3"),
                 "--set nosuchkey: not an option of this program (it takes: collective, "
                 "channel, loop_unit)"),
                (("compile", "ring", "--nranks", "4", "--set", "loop_unit=abc"),
                 "raised TypeError"),
                (("import-mscclpp", foreign), "InterchangeError"),
            ]
            for argv, want in cases:
                with self.subTest(argv=argv):
                    rc, _, err = self.run_cli(*argv)
                    self.assertEqual(rc, 1, err)
                    self.assertTrue(err.startswith("error: "), err)
                    self.assertIn(want, err)
                    self.assertNotIn("Traceback", err)

    def test_error_names_the_call_site(self):
        """An operation made in a helper function: the error names the helper's line and the
        program's line that called it."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "helper.py")
            with open(path, "w") as f:
                f.write("from cchan.dsl import AllGather, Program\n"
                        "def bad_ref(prog):\n"
                        "    return prog.input(0)[3]\n"
                        "def program(nranks):\n"
                        "    prog = Program('bad', AllGather(nranks))\n"
                        "    bad_ref(prog)\n"
                        "    return prog\n")
            rc, _, err = self.run_cli("compile", path, "--nranks", "2")
            self.assertEqual(rc, 1)
            self.assertIn(f"{path}:3: ", err)
            self.assertIn(f"(called from {path}:6)", err)

    def test_compile_rejects_with_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bad.py")
            with open(path, "w") as f:
                f.write("from cchan.dsl import AllGather, Program\n"
                        "def program(nranks):\n"
                        "    prog = Program('bad', AllGather(nranks))\n"
                        "    prog.input(0)[3]\n"
                        "    return prog\n")
            rc, _, err = self.run_cli("compile", path, "--nranks", "2")
            self.assertEqual(rc, 1)
            self.assertIn(f"{path}:4:", err)
            self.assertIn("ChunkRangeError", err)


if __name__ == "__main__":
    unittest.main()
