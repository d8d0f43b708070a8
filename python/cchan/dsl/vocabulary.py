"""The plan format's vocabulary, from vocabulary.json: the one place that defines the op set,
channel kinds, buffers, protocols, collectives, data types and the executor's limits.

Everything else is derived from it (the IR's op classes, the compiler's limit checks, the
schema's enums) or checked against it (`python3 -m cchan.dsl vocab --check`: the C enum and name
tables of kernels/exec, plan.schema.json, the op table of docs/plan-format.md), so adding an op
means editing vocabulary.json, regenerating, and following the failures.
"""
import json
import os
import re

_HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(_HERE, "vocabulary.json")

with open(PATH) as _f:
    V = json.load(_f)

FORMAT = V["format"]
VERSION = V["version"]
BUFFERS = tuple(V["buffers"])
CHANNEL_TYPES = tuple(V["channel_types"])
PROTOCOLS = tuple(V["protocols"])
PACKET_PROTOCOLS = tuple(V["packet_protocols"])
COLLECTIVES = tuple(V["collectives"])
REDUCE_OPS = tuple(V["reduce_ops"])
DTYPES = tuple(V["dtypes"])
OPS = {o["name"]: o for o in V["ops"]}
OP_NAMES = tuple(o["name"] for o in V["ops"])
LIMITS = {k: v["value"] for k, v in V["limits"].items()}
EXECUTOR_UNSUPPORTED = {k: tuple(v) for k, v in V.get("executor_unsupported", {}).items()}


def ops_where(flag, value=True):
    return frozenset(o["name"] for o in V["ops"] if o.get(flag, False) == value)


def channel_needs():
    """op name -> the channel types it runs on (ops that name a channel only)."""
    return {o["name"]: tuple(o["channels"]) for o in V["ops"] if o.get("channels")}


# ---- the artifacts made from the vocabulary, and the checks of those kept by hand

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
SCHEMA = os.path.join(_HERE, "plan.schema.json")
C_PROGRAM_H = os.path.join(ROOT, "kernels", "exec", "exec_program.h")
C_PLAN_C = os.path.join(ROOT, "kernels", "exec", "exec_plan.c")
C_EXEC_H = os.path.join(ROOT, "kernels", "exec", "cchan_exec.h")
PLAN_FORMAT_MD = os.path.join(ROOT, "docs", "plan-format.md")


def schema_with_enums(schema):
    """The plan schema with every enum set from the vocabulary."""
    s = json.loads(json.dumps(schema))
    p, d = s["properties"], s["$defs"]
    p["format"]["enum"] = [FORMAT]
    p["version"]["minimum"] = p["version"]["maximum"] = VERSION
    p["collective"]["enum"] = list(COLLECTIVES)
    p["protocol"]["enum"] = list(PROTOCOLS)
    p["reduce_op"]["enum"] = list(REDUCE_OPS)
    d["channel"]["properties"]["type"]["enum"] = list(CHANNEL_TYPES)
    d["channel"]["properties"]["remote_buffers"]["items"]["enum"] = list(BUFFERS)
    d["channel"]["properties"]["buffer"]["enum"] = list(BUFFERS)
    d["ref"]["properties"]["buf"]["enum"] = list(BUFFERS)
    d["op"]["properties"]["op"]["enum"] = list(OP_NAMES)
    d["op"]["properties"]["protocol"]["enum"] = list(PACKET_PROTOCOLS)
    return s


def schema_text(schema):
    return json.dumps(schema, indent=2) + "\n"


def c_opcode_enum():
    """The C enum of kernels/exec/exec_program.h, as it must read."""
    lines = ["typedef enum exec_opcode {"]
    for i, name in enumerate(OP_NAMES):
        lines.append(f"    EXEC_OP_{name.upper()}{' = 0' if i == 0 else ''},")
    lines += ["    EXEC_OP_COUNT", "} exec_opcode_t;"]
    return "\n".join(lines)


def c_name_table():
    """The op name table of kernels/exec/exec_plan.c (before clang-format)."""
    names = ", ".join(f'"{n}"' for n in OP_NAMES)
    return f"static const char *const exec_op_names[EXEC_OP_COUNT] = {{{names}}};"


def _read(path):
    with open(path) as f:
        return f.read()


def _strings(text):
    return re.findall(r'"([^"]*)"', text)


def _c_table(text, name):
    """The strings of the last C array `name` defined in text."""
    found = re.findall(r"\b" + re.escape(name) + r"\b[^=;(]*=\s*\{(.*?)\};", text, re.S)
    return None if not found else tuple(_strings(found[-1]))


def _c_table_used(text, field, required=1):
    """The name table the loader passes to get_enum for `field`."""
    m = re.search(r'"' + field + r'", ' + str(required) + r', (\w+)', text)
    return None if m is None else _c_table(text[:m.start()], m.group(1))


def drift():
    """Every place that disagrees with the vocabulary, as readable lines (empty: all in step)."""
    out = []

    def same(what, got, want):
        if got is None:
            out.append(f"{what}: not found")
        elif tuple(got) != tuple(want):
            out.append(f"{what}: {list(got)}, want {list(want)} (vocabulary.json)")

    with open(SCHEMA) as f:
        sch = json.load(f)
    if sch != schema_with_enums(sch):
        out.append(f"{SCHEMA}: enums differ from vocabulary.json "
                   f"(run: python3 -m cchan.dsl vocab --write)")
    if os.path.exists(C_PROGRAM_H):
        h = _read(C_PROGRAM_H)
        m = re.search(r"typedef enum exec_opcode \{(.*?)\}", h, re.S)
        got = None
        if m:
            got = [e.split("=")[0].strip() for e in m.group(1).split(",") if e.strip()]
        same(f"{C_PROGRAM_H}: enum exec_opcode", got,
             [f"EXEC_OP_{n.upper()}" for n in OP_NAMES] + ["EXEC_OP_COUNT"])
        m = re.search(r"enum exec_chan_type \{(.*?)\}", h, re.S)
        same(f"{C_PROGRAM_H}: enum exec_chan_type",
             m and [e.split("=")[0].strip() for e in m.group(1).split(",")],
             [f"EXEC_CH_{t.upper()}" for t in CHANNEL_TYPES])
        m = re.search(r"enum exec_buf \{(.*?)\}", h, re.S)
        same(f"{C_PROGRAM_H}: enum exec_buf",
             m and [e.split("=")[0].strip() for e in m.group(1).split(",")],
             [f"EXEC_BUF_{b.upper()}" for b in BUFFERS] + ["EXEC_NBUF"])
        m = re.search(r"enum exec_proto \{(.*?)\}", h, re.S)
        same(f"{C_PROGRAM_H}: enum exec_proto",
             m and [e.split("=")[0].strip() for e in m.group(1).split(",")],
             [f"EXEC_PROTO_{p.upper()}" for p in PROTOCOLS])
        c = _read(C_PLAN_C)
        for key, spec in V["limits"].items():
            if "c" in spec:
                m = re.search(r"#define\s+" + spec["c"] + r"\s+(\d+)", h)
                got = m and int(m.group(1))
                where = f"{C_PROGRAM_H}: {spec['c']}"
            else:
                m = re.search(spec["c_loader"], c)
                got = m and int(m.group(1))
                if got is not None and spec.get("c_loader_shift"):
                    got = 1 << got
                where = f"{C_PLAN_C}: the loader's {key} (/{spec['c_loader']}/)"
            if got != LIMITS[key]:
                out.append(f"{where}: {got}, want {LIMITS[key]} (vocabulary.json limits.{key})")
        same(f"{C_PLAN_C}: exec_op_names", _c_table(c, "exec_op_names"), OP_NAMES)
        same(f"{C_PLAN_C}: exec_buf_names", _c_table(c, "exec_buf_names"), BUFFERS)
        same(f"{C_PLAN_C}: exec_coll_names", _c_table(c, "exec_coll_names"), COLLECTIVES)
        same(f"{C_PLAN_C}: exec_ch_type_names", _c_table(c, "exec_ch_type_names"),
             CHANNEL_TYPES)
        same(f"{C_PLAN_C}: plan protocols", _c_table_used(c, "protocol"), PROTOCOLS)
        same(f"{C_PLAN_C}: reduce ops", _c_table_used(c, "reduce_op"), REDUCE_OPS)
        same(f"{C_PLAN_C}: packet protocols", _c_table_used(c, "protocol", 0),
             PACKET_PROTOCOLS)
        same(f"{C_PLAN_C}: format", _c_table_used(c, "format"), [FORMAT])
        e = _read(C_EXEC_H)
        m = re.search(r"enum cchan_exec_collective \{(.*?)\}", e, re.S)
        same(f"{C_EXEC_H}: enum cchan_exec_collective",
             m and [x.split("=")[0].strip() for x in m.group(1).split(",")],
             [f"CCHAN_EXEC_{k.upper()}" for k in COLLECTIVES])
        m = re.search(r"enum cchan_exec_dtype \{(.*?)\}", e, re.S)
        same(f"{C_EXEC_H}: enum cchan_exec_dtype",
             m and [x.split("=")[0].strip() for x in m.group(1).split(",")],
             [f"CCHAN_EXEC_{t.upper()}" for t in DTYPES])
    if os.path.exists(PLAN_FORMAT_MD):
        md = _read(PLAN_FORMAT_MD)
        m = re.search(r"\n\| op \| fields \| semantics[^\n]*\n\|[-|]+\n(.*?)\n\n", md, re.S)
        rows = m and [re.match(r"\| `([a-z_]+)`", ln).group(1) for ln in m.group(1).splitlines()]
        same(f"{PLAN_FORMAT_MD}: the op table", rows, OP_NAMES)
        m = re.search(r"\n\| limit \| value \| what \|\n\|[-|]+\n(.*?)\n\n", md, re.S)
        rows = m and [tuple(re.match(r"\| `(\w+)` \| (\d+) ", ln).groups())
                      for ln in m.group(1).splitlines()]
        same(f"{PLAN_FORMAT_MD}: the limits table", rows,
             [(k, str(v)) for k, v in LIMITS.items()])
    return out
