"""The gallery of docs/dsl.md (python/cchan/dsl/gallery): every entry compiles and verifies at
each of its rank counts, its plan document re-verifies on its own, the programs that need an
operation cchan lacks fail the way the docs say, and the docs' table matches the programs.

Run: PYTHONPATH=python /usr/bin/python3 -m unittest -v test_gallery (from test/dsl)
Plans for the host executor: python3 test_gallery.py DIR (every entry the executor runs, 2 and 4
ranks, as DIR/<name>.n<N>.json for exec_host).
"""
import importlib
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

from cchan.dsl import AllReduce, Program, RaceError  # noqa: E402
from cchan.dsl import compiler, plans  # noqa: E402
from cchan.dsl.gallery import ENTRIES  # noqa: E402

DOC = os.path.join(ROOT, "docs", "dsl.md")


def programs():
    """(title, module, variant, options, nranks) of every gallery plan."""
    for title, name, variants, _host in ENTRIES:
        mod = importlib.import_module(name)
        for v in variants:
            for n in mod.RANKS:
                yield title, mod, v, mod.VARIANTS[v], n


class Gallery(unittest.TestCase):
    def test_every_entry_compiles_and_verifies(self):
        seen = 0
        for title, mod, variant, options, n in programs():
            with self.subTest(entry=title, variant=variant, nranks=n):
                doc = mod.program(n, **options).compile()
                self.assertEqual(doc["name"], variant)
                self.assertEqual(doc["nranks"], n)
                compiler.verify_plan(doc)  # the document alone: schema, rules, postcondition
                seen += 1
        self.assertEqual(seen, sum(len(v) * 3 for _t, _m, v, _h in ENTRIES))

    def test_parallel_channels_and_groups_are_used(self):
        # The entries named for a feature must use it, not merely compute the collective.
        def plan(name, variant, n=4):
            mod = importlib.import_module(name)
            return mod.program(n, **mod.VARIANTS[variant]).compile()

        for variant in ("allgather_ring_port", "allreduce_ring_mem_x2"):
            mod = [m for _t, m, v, _h in ENTRIES if variant in v][0]
            chans = plan(mod, variant)["ranks"][0]["channels"]
            self.assertEqual(sorted({c["index"] for c in chans}), [0, 1], variant)
        tbg = plan("cchan.dsl.gallery.allgather_tbg", "allgather_tbg")["ranks"][0]
        self.assertTrue(any("tbg_size" in o for t in tbg["threadblocks"] for o in t["ops"]))
        for variant in ("allreduce_nvls_zc", "allreduce_nvls_pipelined"):
            ops = {o["op"] for t in plan("cchan.dsl.gallery.allreduce_nvls", variant)["ranks"][1]
                   ["threadblocks"] for o in t["ops"]}
            self.assertLessEqual({"switch_reduce", "switch_broadcast"}, ops)
        pipe = plan("cchan.dsl.gallery.alltoall_pipeline", "alltoall_pipeline")
        self.assertGreater(pipe["loop_unit"], 0)

    def test_missing_operations(self):
        # LL packets over port channels (the two-node LL AllReduce's crossing) do not exist.
        prog = Program("ll_port", AllReduce(2), protocol="ll16")
        with self.assertRaisesRegex(AttributeError,
                                    "'PortChannel' object has no attribute 'put_packets'"):
            prog.port_channel(0, 1).put_packets(prog.scratch(1)[0], prog.input(0)[0], 0)

    def test_nvls_barrier_is_needed(self):
        # Without the closing barrier a rank's run can end while others still store into it.
        from cchan.dsl.gallery import allreduce_nvls
        real = Program.barrier
        calls = []

        def first_only(self, tb, ranks=None, channel="memory"):
            calls.append(tb)
            if len(calls) == 1:
                real(self, tb, ranks, channel)

        Program.barrier = first_only
        try:
            with self.assertRaises(RaceError):
                allreduce_nvls.program(4).compile()
        finally:
            Program.barrier = real

    def test_docs_table(self):
        # docs/dsl.md's gallery lists every entry with the program's line count.
        text = open(DOC).read()
        rows = re.findall(r"^\| (.+?) \| \[`(\S+?\.py)`\]\(\S+\) \| (\d+) \|", text, re.M)
        self.assertEqual([t for t, _p, _n in rows], [t for t, _m, _v, _h in ENTRIES])
        for (title, path, count), (_t, name, _v, _h) in zip(rows, ENTRIES):
            self.assertEqual(path, name.replace("cchan.dsl.", "").replace(".", "/") + ".py")
            src = importlib.import_module(name).__file__
            with open(src) as f:
                self.assertEqual(int(count), len(f.read().splitlines()), title)


def write_host_plans(outdir, ranks=(2, 4)):
    os.makedirs(outdir, exist_ok=True)
    for _title, name, variants, host in ENTRIES:
        mod = importlib.import_module(name)
        for v in variants if host else []:
            for n in ranks:
                with open(os.path.join(outdir, plans.plan_file(v, n)), "w") as f:
                    f.write(plans.dumps(mod.program(n, **mod.VARIANTS[v]).compile()))


if __name__ == "__main__":
    write_host_plans(sys.argv[1])
