"""MSCCL++ execution plans in and out (python/cchan/dsl/mscclpp.py, docs/dsl.md).

The MSCCL++ plans here are written for these tests from the format's description.
Run: PYTHONPATH=python /usr/bin/python3 -m unittest -v test_mscclpp (in test/dsl)
"""
import contextlib
import copy
import glob
import io
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))

from cchan.dsl import Custom, Program, compiler  # noqa: E402
from cchan.dsl import __main__ as cli  # noqa: E402
from cchan.dsl import mscclpp  # noqa: E402
from cchan.dsl.mscclpp import NO_LIMIT, InterchangeError  # noqa: E402

PLANS = sorted(glob.glob(os.path.join(ROOT, "plans", "*.json")))


def meaning(doc):
    """What a plan does, without what the conversion may renumber: channels by (type, peer,
    rank of their index among the channels to that peer), no source lines, no memory-channel
    flush (it does nothing)."""
    ranks = []
    for rk in doc["ranks"]:
        ch = rk["channels"]

        def key(i):
            c = ch[i]
            same = sorted(x["index"] for x in ch if (x["type"], x["peer"]) == (c["type"],
                                                                                c["peer"]))
            return (c["type"], c["peer"], same.index(c["index"]))

        blocks = []
        for t in rk["threadblocks"]:
            ops = []
            for o in t["ops"]:
                if o["op"] == "flush" and ch[o["ch"]]["type"] == "memory":
                    continue
                d = {k: v for k, v in o.items() if k != "loc"}
                if "ch" in d:
                    d["ch"] = key(d["ch"])
                for f in ("src", "dst"):
                    if f in d:
                        d[f] = [dict(r, ch=key(r["ch"])) if "ch" in r else r for r in d[f]]
                ops.append(d)
            blocks.append(ops)
        chans = sorted((key(i), tuple(c.get("remote_buffers", []))) for i, c in enumerate(ch))
        ranks.append((rk["rank"], rk["scratch_chunks"], rk["semaphores"], chans, blocks))
    return {k: v for k, v in doc.items() if k != "ranks"}, ranks


def minimal_allreduce(n_peers=2):
    """A 2-rank AllReduce in MSCCL++'s format: handshake, read-reduce of the peer's input,
    put of the result into the peer's output, signal and wait."""
    gpus = []
    for r in range(2):
        p = 1 - r
        gpus.append({
            "id": r, "input_chunks": 2, "output_chunks": 2, "scratch_chunks": 0,
            "channels": [{"channel_type": "memory", "connected_to": [p]}],
            "remote_buffers": [{"rank": p, "type": "i", "access_channel_types": ["memory"]},
                               {"rank": p, "type": "o", "access_channel_types": ["memory"]}],
            "semaphores": [],
            "threadblocks": [{
                "id": 0,
                "channels": [{"channel_type": "memory", "channel_ids": [0]}],
                "remote_buffer_refs": [{"access_channel_type": "memory",
                                        "remote_buffer_ids": [0, 1]}],
                "ops": [
                    {"name": "rlxsignal", "channel_ids": [0], "channel_type": "memory"},
                    {"name": "rlxwait", "channel_ids": [0], "channel_type": "memory"},
                    {"name": "nop"},
                    {"name": "rre", "channel_type": "memory", "reduce_op": "sum",
                     "src_buff": [{"type": "i", "index": r, "size": 1},
                                  {"buffer_id": 0, "index": r, "size": 1}],
                     "dst_buff": [{"type": "o", "index": r, "size": 1}]},
                    {"name": "nop"},
                    {"name": "put", "channel_type": "memory",
                     "src_buff": [{"type": "o", "index": r, "size": 1}],
                     "dst_buff": [{"buffer_id": 1, "index": r, "size": 1}]},
                    {"name": "nop"},
                    {"name": "signal", "channel_ids": [0], "channel_type": "memory"},
                    {"name": "wait", "channel_ids": [0], "channel_type": "memory"},
                    {"name": "nop"},
                ]}],
        })
    return {"name": "minimal_allreduce", "collective": "allreduce", "protocol": "Simple",
            "inplace": False, "reuse_resources": False, "num_threads_per_block": 1024,
            "use_double_scratch_buffer": False, "buffer_alignment": 16,
            "min_message_size": 0, "max_message_size": NO_LIMIT, "gpus": gpus}


def barrier_allreduce(barrier=2):
    """minimal_allreduce split over two thread blocks per rank: block 0 reduces into the output,
    block 1 puts the result to the peer after a barrier among the two (MSCCL++'s `barrier`, which
    joins thread blocks of one GPU). barrier=None leaves the barrier out; another number makes
    the barrier name that many blocks."""
    gpus = []
    for r in range(2):
        p = 1 - r
        bar = [] if barrier is None else [{"name": "barrier", "barrier_id": 0,
                                           "num_threadblocks": barrier}]
        gpus.append({
            "id": r, "input_chunks": 2, "output_chunks": 2, "scratch_chunks": 0,
            "channels": [{"channel_type": "memory", "connected_to": [p, p]}],
            "remote_buffers": [{"rank": p, "type": "i", "access_channel_types": ["memory"]},
                               {"rank": p, "type": "o", "access_channel_types": ["memory"]}],
            "semaphores": [],
            "threadblocks": [{
                "id": 0,
                "channels": [{"channel_type": "memory", "channel_ids": [0]}],
                "remote_buffer_refs": [{"access_channel_type": "memory",
                                        "remote_buffer_ids": [0]}],
                "ops": [
                    {"name": "rlxsignal", "channel_ids": [0], "channel_type": "memory"},
                    {"name": "rlxwait", "channel_ids": [0], "channel_type": "memory"},
                    {"name": "nop"},
                    {"name": "rre", "channel_type": "memory", "reduce_op": "sum",
                     "src_buff": [{"type": "i", "index": r, "size": 1},
                                  {"buffer_id": 0, "index": r, "size": 1}],
                     "dst_buff": [{"type": "o", "index": r, "size": 1}]},
                    {"name": "nop"},
                ] + bar}, {
                "id": 1,
                "channels": [{"channel_type": "memory", "channel_ids": [1]}],
                "remote_buffer_refs": [{"access_channel_type": "memory",
                                        "remote_buffer_ids": [1]}],
                "ops": bar + [
                    {"name": "put", "channel_type": "memory",
                     "src_buff": [{"type": "o", "index": r, "size": 1}],
                     "dst_buff": [{"buffer_id": 0, "index": r, "size": 1}]},
                    {"name": "nop"},
                    {"name": "signal", "channel_ids": [0], "channel_type": "memory"},
                    {"name": "wait", "channel_ids": [0], "channel_type": "memory"},
                    {"name": "nop"},
                ]}],
        })
    m = minimal_allreduce()
    m["name"] = "barrier_allreduce"
    m["gpus"] = gpus
    return m


class RoundTrip(unittest.TestCase):
    def test_every_shipped_plan(self):
        """export, JSON, import, verify: the same ops per rank and block, the same channels."""
        self.assertGreater(len(PLANS), 10)
        for path in PLANS:
            with self.subTest(plan=os.path.basename(path)):
                with open(path) as f:
                    doc = json.load(f)
                m = json.loads(json.dumps(mscclpp.export_plan(doc)))
                self.assertNotIn("format", m)
                self.assertEqual(len(m["gpus"]), doc["nranks"])
                back = mscclpp.import_plan(m)  # verifies
                self.assertEqual(meaning(back), meaning(doc))

    def test_export_spells_out_block_syncs(self):
        """MSCCL++ ops do not synchronize the block: a memory put_signal becomes put, nop,
        signal; a wait is followed by a nop; port put_signal is pws."""
        with open(os.path.join(ROOT, "plans", "reducescatter_ring_mem.n2.json")) as f:
            m = mscclpp.export_plan(json.load(f))
        names = [o["name"] for o in m["gpus"][0]["threadblocks"][0]["ops"]]
        self.assertEqual(names[:4], ["nop", "signal", "nop", "wait"])
        with open(os.path.join(ROOT, "plans", "reducescatter_ring_port.n2.json")) as f:
            m = mscclpp.export_plan(json.load(f))
        body = [o for o in m["gpus"][0]["threadblocks"][0]["ops"] if o["name"] == "pipeline"]
        self.assertEqual(len(body), 1)
        self.assertEqual(body[0]["iter_context"]["num_chunks"], 1)
        self.assertIn("pws", [o["name"] for o in body[0]["ops"]])
        self.assertIn("flush", [o["name"] for o in body[0]["ops"]])

    def test_no_limit(self):
        with open(PLANS[0]) as f:
            doc = json.load(f)
        self.assertEqual(doc["max_bytes"], 0)
        m = mscclpp.export_plan(doc)
        self.assertEqual(m["max_message_size"], NO_LIMIT)
        self.assertEqual(mscclpp.import_plan(m)["max_bytes"], 0)
        # AllGather: MSCCL++ bounds the output size, cchan the input.
        ag = next(p for p in PLANS if "allgather" in p and p.endswith("n4.json"))
        with open(ag) as f:
            doc = json.load(f)
        doc["min_bytes"], doc["max_bytes"] = 64, 4096
        m = mscclpp.export_plan(doc)
        self.assertEqual((m["min_message_size"], m["max_message_size"]), (256, 16384))
        back = mscclpp.import_plan(m)
        self.assertEqual((back["min_bytes"], back["max_bytes"]), (64, 4096))


class Import(unittest.TestCase):
    def test_minimal_allreduce(self):
        doc = mscclpp.import_plan(minimal_allreduce())
        self.assertEqual(doc["collective"], "allreduce")
        self.assertEqual(doc["max_bytes"], 0)  # 2^64-1: no upper limit
        ops = [o["op"] for o in doc["ranks"][0]["threadblocks"][0]["ops"]]
        # relaxed signals become signals, nops next to syncing ops vanish, put + nop + signal
        # on one memory channel is put_signal
        self.assertEqual(ops, ["signal", "wait", "reduce", "sync", "put_signal", "wait"])
        red = doc["ranks"][0]["threadblocks"][0]["ops"][2]
        self.assertEqual(red["src"][1], {"buf": "input", "chunk": 0, "count": 1, "ch": 0})
        self.assertEqual(doc["ranks"][1]["channels"][0]["remote_buffers"], ["input", "output"])

    def test_verifier_runs(self):
        """A plan that converts but is wrong is refused by cchan's verifier."""
        m = minimal_allreduce()
        ops = m["gpus"][1]["threadblocks"][0]["ops"]
        del ops[-2]  # rank 1 no longer waits for rank 0's last signal
        with self.assertRaises(Exception) as cm:
            mscclpp.import_plan(m)
        self.assertNotIsInstance(cm.exception, InterchangeError)

    def test_refused_ops_are_named(self):
        cases = [
            ({"name": "cpkt", "src_buff": [{"type": "i", "index": 0, "size": 1}],
              "dst_buff": [{"type": "s", "index": 0, "size": 1}]}, "cpkt"),
            ({"name": "glres", "channel_type": "switch", "src_buff": [], "dst_buff": []},
             "glres"),
            ({"name": "rppkt", "channel_type": "memory", "src_buff": [], "dst_buff": []},
             "rppkt"),
            ({"name": "teleport"}, "teleport"),
        ]
        for op, name in cases:
            m = minimal_allreduce()
            m["gpus"][0]["threadblocks"][0]["ops"].insert(3, op)
            with self.subTest(op=name):
                with self.assertRaises(InterchangeError) as cm:
                    mscclpp.import_plan(m)
                self.assertTrue(str(cm.exception).startswith(f"{name} (rank 0, thread block 0)"),
                                str(cm.exception))

    def test_block_barrier(self):
        """A barrier among a rank's thread blocks becomes rank-local semaphores: each block
        releases one to the other, then acquires the other's; the verifier then sees block 1's
        put of what block 0 reduced as ordered. Without the barrier that put is a race, refused by
        the verifier (not by the converter); a barrier whose count disagrees with the blocks that
        take part is refused by the converter."""
        doc = mscclpp.import_plan(barrier_allreduce())
        for rk in doc["ranks"]:
            self.assertEqual(rk["semaphores"], 2)
            b0 = [o for o in rk["threadblocks"][0]["ops"] if o["op"].startswith("sem_")]
            b1 = [o for o in rk["threadblocks"][1]["ops"] if o["op"].startswith("sem_")]
            self.assertEqual(b0, [{"op": "sem_release", "sem": 0},
                                  {"op": "sem_acquire", "sem": 1}])
            self.assertEqual(b1, [{"op": "sem_release", "sem": 1},
                                  {"op": "sem_acquire", "sem": 0}])
        compiler.verify_plan(doc)
        with self.assertRaises(Exception) as cm:
            mscclpp.import_plan(barrier_allreduce(barrier=None))
        self.assertNotIsInstance(cm.exception, InterchangeError)
        with self.assertRaisesRegex(InterchangeError, r"barrier 0 names \[3\] thread blocks, but "
                                                      r"2 blocks take part"):
            mscclpp.import_plan(barrier_allreduce(barrier=3))

    def test_committed_plans_current(self):
        """mscclpp_plans/ (imported and run on the host backend by CMake's roundtrip tests) holds
        what this file's builders make."""
        with open(os.path.join(HERE, "mscclpp_plans", "barrier_allreduce.n2.mscclpp.json")) as f:
            self.assertEqual(json.load(f), barrier_allreduce())

    def test_reuse_resources(self):
        """reuse_resources changes only where MSCCL++ keeps its scratch: the same cchan plan."""
        m = minimal_allreduce()
        m["reuse_resources"] = True
        self.assertEqual(mscclpp.import_plan(m), mscclpp.import_plan(minimal_allreduce()))

    def test_refused_plans(self):
        m = minimal_allreduce()
        m["gpus"][0]["channels"].append({"channel_type": "switch", "buffer_type": "o",
                                         "rank_groups": [{"size": 2, "ranks": [0, 1]}]})
        with self.assertRaisesRegex(InterchangeError, "switch"):
            mscclpp.import_plan(m)
        m = minimal_allreduce()
        m["gpus"][0]["semaphores"] = [{"init_value": 1}]
        with self.assertRaisesRegex(InterchangeError, "starting at 1"):
            mscclpp.import_plan(m)


class Export(unittest.TestCase):
    def test_refused_ops_are_named(self):
        with open(os.path.join(ROOT, "plans", "allreduce_2pa_zc.n2.json")) as f:
            doc = json.load(f)
        bad = copy.deepcopy(doc)
        bad["ranks"][0]["threadblocks"][0]["ops"].insert(0, {"op": "barrier"})
        with self.assertRaisesRegex(InterchangeError, r"^barrier \(rank 0, thread block 0\)"):
            mscclpp.export_plan(bad)
        bad = copy.deepcopy(doc)
        rp = next(o for o in bad["ranks"][0]["threadblocks"][0]["ops"] if o["op"] ==
                  "reduce_put")
        del rp["dst"][1]
        with self.assertRaisesRegex(InterchangeError, r"^reduce_put \(rank 0.*local result"):
            mscclpp.export_plan(bad)

    def test_custom_postcondition_survives(self):
        def build(n):
            # rank r's output chunk 0 gets rank (r+1)'s input chunk 0
            prog = Program("shift", Custom(n, 1, 1, lambda r, c: {((r + 1) % n, 0): 1}))
            for r in range(n):
                ch = prog.memory_channel(r, (r - 1) % n)
                back = prog.memory_channel(r, (r + 1) % n)
                back.signal(0)
                ch.wait(0)
                ch.put(prog.output((r - 1) % n)[0], prog.input(r)[0], 0)
                ch.signal(0)
                back.wait(0)
            return prog
        doc = build(3).compile()
        self.assertIn("postcondition", doc)
        m = json.loads(json.dumps(mscclpp.export_plan(doc)))
        self.assertEqual(m["collective"], "custom")
        self.assertEqual(m["cchan"]["postcondition"], doc["postcondition"])
        back = mscclpp.import_plan(m)
        self.assertEqual(back["postcondition"], doc["postcondition"])
        self.assertEqual(meaning(back), meaning(doc))
        # the postcondition is checked: a plan claiming another one is refused
        m["cchan"]["postcondition"][0][0] = [[2, 0, 1]]
        with self.assertRaisesRegex(Exception, "output chunk 0 of rank 0"):
            mscclpp.import_plan(m)
        # without the extension (an MSCCL++ tool dropped it) the plan is custom, unchecked
        del m["cchan"]
        self.assertNotIn("postcondition", mscclpp.import_plan(m))


class Cli(unittest.TestCase):
    def run_cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(list(argv))
        return rc, out.getvalue(), err.getvalue()

    def test_verify_and_show_point_to_import(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.json")
            with open(path, "w") as f:
                json.dump(minimal_allreduce(), f)
            for cmd in ("verify", "show"):
                rc, out, err = self.run_cli(cmd, path)
                self.assertEqual(rc, 1)
                self.assertIn("MSCCL++ execution plan", err)
                self.assertIn(f"import-mscclpp {path}", err)
                self.assertNotIn("Traceback", err)

    def test_import_export(self):
        with tempfile.TemporaryDirectory() as tmp:
            m, plan, again = (os.path.join(tmp, n) for n in ("m.json", "p.json", "m2.json"))
            with open(m, "w") as f:
                json.dump(minimal_allreduce(), f)
            rc, _, err = self.run_cli("import-mscclpp", m, "-o", plan)
            self.assertEqual(rc, 0, err)
            self.assertIn("verified", err)
            rc, out, _ = self.run_cli("verify", plan)
            self.assertEqual(rc, 0)
            rc, _, err = self.run_cli("export-mscclpp", plan, "-o", again)
            self.assertEqual(rc, 0, err)
            with open(again) as f:
                self.assertEqual(len(json.load(f)["gpus"]), 2)
            rc, _, err = self.run_cli("import-mscclpp", plan)
            self.assertEqual(rc, 1)
            self.assertIn("not an MSCCL++ execution plan", err)
            bad = minimal_allreduce()
            bad["gpus"][0]["threadblocks"][0]["ops"][3] = {"name": "cpkt"}
            with open(m, "w") as f:
                json.dump(bad, f)
            rc, _, err = self.run_cli("import-mscclpp", m, "-o", plan)
            self.assertEqual(rc, 1)
            self.assertIn("InterchangeError: cpkt (rank 0, thread block 0)", err)
            self.assertNotIn("Traceback", err)


if __name__ == "__main__":
    unittest.main()
