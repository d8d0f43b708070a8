"""Which GPU a communicator runs on, checked without a GPU: torch.cuda faked as a host of 4 GPUs
(the current device 0 until set_device moves it) and the C communicator made on the host backend
while reporting the CUDA device it was given (by the C library's rule: the config's device, else
the bootstrap's local rank modulo the GPUs). At N ranks under cchan-run, every rank simulating
local ranks 0..4 through each launcher's variable, and its own through every constructor.

The rule (docs/python.md, Communicators): the `device` given; else torch's current device where
the application chose one (torch.cuda.set_device); else the launcher's local rank modulo the GPUs
(torch.distributed's global rank where no launcher names one), never the rank in a subgroup. Every
constructor (Comm() from the environment, from_process_group over the world or a subgroup,
from_unique_id, CustomAllreduce) chooses the same GPU in a process, and comm.device is the GPU
given to the C library. On real GPUs a mismatch shows as "t: expected a tensor on cuda:1 (the
communicator's device), got cuda:0" and a launch failure; here as a wrong ordinal.

Also: no Python test, example or benchmark names a GPU itself ("cuda:0", .cuda(), a bare "cuda"):
their tensors go on comm.device.

    cchan-run -n 4 /usr/bin/python3 test/python/test_device.py

Exit 0 when every check passed on every rank, 77 (skip) without torch.
"""

import ctypes
import glob
import os
import re
import sys
import traceback

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print(f"SKIP: the Python tests need torch ({e}); Debian: apt-get install python3-torch")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import cchan  # noqa: E402
from cchan import _lib  # noqa: E402
from cchan import comm as ccomm  # noqa: E402

RANK = int(os.environ["CCHAN_RANK"])
SIZE = int(os.environ["CCHAN_WORLD_SIZE"])
LOCAL = int(os.environ["CCHAN_LOCAL_RANK"])
session = os.environ.get("CCHAN_BOOTSTRAP_SESSION", "x")
store = f"/tmp/cchan-devtest-{session}-{os.getppid()}"
dist.init_process_group("gloo", init_method=f"file://{store}", rank=RANK, world_size=SIZE)

NGPU = 4
# Each launcher's local-rank variable (src/host/bootstrap_env.c).
LOCAL_VARS = ["CCHAN_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
              "SLURM_LOCALID"]
failures = []
checks = [0]


def expect(cond, what):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print(f"[r{RANK}] FAIL: {what}", flush=True)


def cuda(i):
    return torch.device("cuda", i)


class FakeCuda:
    """torch.cuda of a process on a host of NGPU GPUs: device 0 is current until set_device."""

    def __init__(self):
        self.reset()

    def reset(self, current=None):
        """A fresh process (current None: nothing chosen) or one whose application called
        torch.cuda.set_device(current)."""
        self.current = 0 if current is None else current
        self.initialized = current is not None
        self.moves = []

    def set_device(self, d):
        d = d.index if isinstance(d, torch.device) else int(d)
        if not 0 <= d < NGPU:
            raise RuntimeError(f"fake set_device({d}): {NGPU} GPUs")
        self.moves.append(d)
        self.current, self.initialized = d, True

    def current_device(self):
        self.initialized = True
        return self.current

    def install(self):
        saved = {n: getattr(torch.cuda, n) for n in
                 ("is_available", "device_count", "current_device", "set_device",
                  "is_initialized")}
        torch.cuda.is_available = lambda: True
        torch.cuda.device_count = lambda: NGPU
        torch.cuda.current_device = self.current_device
        torch.cuda.set_device = self.set_device
        torch.cuda.is_initialized = lambda: self.initialized
        return saved


class FakeLib:
    """libcchan with cchan_comm_create on the host backend: records the config's device, and
    cchan_comm_platform / cchan_comm_device report CUDA and the device the C library would run
    on (src/host/comm.c: the config's device, else the local rank modulo the GPUs)."""

    def __init__(self, real):
        self._real = real
        self.given = []
        self._dev = {}

    def __getattr__(self, name):
        return getattr(self._real, name)

    def cchan_comm_create(self, bs, cfg_ref, out_ref):
        cfg = cfg_ref._obj
        self.given.append(cfg.device)
        host = _lib.CommConfig.from_buffer_copy(cfg)
        host.platform, host.device = _lib.PLATFORM_HOST, -1
        rc = self._real.cchan_comm_create(bs, ctypes.byref(host), out_ref)
        if rc == 0:
            lr = self._real.cchan_bootstrap_local_rank(bs)
            self._dev[out_ref._obj.value] = cfg.device if cfg.device >= 0 else max(lr, 0) % NGPU
        return rc

    def cchan_comm_platform(self, c):
        return _lib.PLATFORM_CUDA

    def cchan_comm_device(self, c):
        return self._dev[c.value]


fake = FakeCuda()
lib = FakeLib(_lib.core())


class Env:
    """os.environ with the launchers' local-rank variables replaced by `vars` for a block."""

    def __init__(self, **vars):
        self.vars = vars

    def __enter__(self):
        self.saved = {v: os.environ.pop(v) for v in LOCAL_VARS if v in os.environ}
        os.environ.update({k: str(v) for k, v in self.vars.items()})

    def __exit__(self, *exc):
        for v in LOCAL_VARS:
            os.environ.pop(v, None)
        os.environ.update(self.saved)
        return False


def made(c, want, what):
    """c runs on cuda:want, the C library was given want, and it is torch's current device (where
    tensors made on 'cuda' go), with no move to another GPU on the way."""
    got = (c.device, lib.given[-1:], fake.current, sorted(set(fake.moves) - {want}))
    expect(got == (cuda(want), [want], want, []),
           f"{what}: comm.device {got[0]}, the C library given {got[1]}, torch's current device "
           f"{got[2]}, set_device to {got[3]}; expected {cuda(want)} everywhere")


def uid_over(src=0, group=None):
    """A unique id made on global rank src, broadcast over group."""
    t = torch.zeros(128, dtype=torch.uint8)
    if RANK == src:
        t.copy_(torch.tensor(list(cchan.unique_id()), dtype=torch.uint8))
    dist.broadcast(t, src, group=group)
    return bytes(t.tolist())


# ------------------------------------------------------------------ cases


def case_local_ranks():
    """Nothing chosen: local ranks 0..4 through each launcher's variable take their own GPU from
    a process group (4 wraps to 0), whatever this process's rank in the group."""
    for var in LOCAL_VARS:
        for lr in range(NGPU + 1):
            fake.reset()
            with Env(**{var: lr}):
                c = cchan.Comm.from_process_group(platform="cuda")
            made(c, lr % NGPU, f"from_process_group, {var}={lr}")
            c.close()


def case_no_launcher():
    """No launcher variable: the global rank modulo the GPUs (torch.distributed's guess)."""
    fake.reset()
    with Env():
        c = cchan.Comm.from_process_group(platform="cuda")
    made(c, RANK % NGPU, "from_process_group without a launcher's local rank")
    c.close()


def case_every_constructor():
    """The GPU run of test_cchan.py: a process group's communicator, then Comm() from the
    environment and from_unique_id in the same process: one GPU, the local rank's, and the
    tensors the harness makes on comm.device pass every communicator's device check."""
    fake.reset()
    comm = cchan.Comm.from_process_group(platform="cuda")
    made(comm, LOCAL % NGPU, "from_process_group")
    c2 = cchan.Comm(platform="cuda")
    made(c2, LOCAL % NGPU, "Comm() after from_process_group")
    c3 = cchan.Comm.from_unique_id(uid_over(), RANK, SIZE, platform="cuda")
    made(c3, LOCAL % NGPU, "from_unique_id after from_process_group")
    expect(comm.device == c2.device == c3.device,
           f"one process, three devices: {comm.device} {c2.device} {c3.device}")
    for c in (c3, c2, comm):
        c.close()
    fake.reset()
    c2 = cchan.Comm(platform="cuda")
    made(c2, LOCAL % NGPU, "Comm() first")
    comm = cchan.Comm.from_process_group(platform="cuda")
    made(comm, LOCAL % NGPU, "from_process_group after Comm()")
    comm.close()
    c2.close()


def case_subgroup():
    """Ranks {N/2..N-1}: the bootstrap's local rank counts the subgroup (0, 1, ...), the GPU is
    the launcher's local rank's (with no launcher variable: the global rank's)."""
    ranks = list(range(SIZE // 2, SIZE))
    g = dist.new_group(ranks)
    if RANK not in ranks:
        return
    fake.reset()
    c = cchan.Comm.from_process_group(g, platform="cuda")
    made(c, LOCAL % NGPU, f"subgroup {ranks}")
    expect(c.local_rank == RANK - ranks[0], f"subgroup {ranks}: bootstrap local rank "
           f"{c.local_rank}")
    c.close()
    fake.reset()
    with Env():
        c = cchan.Comm.from_process_group(g, platform="cuda")
    made(c, RANK % NGPU, f"subgroup {ranks} without a launcher's local rank")
    c.close()
    fake.reset()
    c = cchan.Comm.from_unique_id(uid_over(ranks[0], g), RANK - ranks[0], len(ranks),
                                  platform="cuda")
    made(c, LOCAL % NGPU, f"subgroup {ranks} from_unique_id")
    c.close()


def case_application_chose():
    """torch.cuda.set_device(d) before the communicator: d, from every constructor, also where
    d is not the local rank's GPU; no move to another GPU. GPU 0 is where torch starts, so
    set_device(0) cannot be told from no choice: the local rank's GPU, and device=0 for 0."""
    d = LOCAL % (NGPU - 1) + 1  # not 0, not the local rank's
    fake.reset(d)
    c = cchan.Comm.from_process_group(platform="cuda")
    made(c, d, f"set_device({d}), from_process_group")
    c.close()
    fake.reset(d)
    c = cchan.Comm(platform="cuda")
    made(c, d, f"set_device({d}), Comm()")
    c.close()
    fake.reset(d)
    c = cchan.Comm.from_unique_id(uid_over(), RANK, SIZE, platform="cuda")
    made(c, d, f"set_device({d}), from_unique_id")
    c.close()
    fake.reset(0)
    c = cchan.Comm.from_process_group(platform="cuda")
    made(c, LOCAL % NGPU, "set_device(0), from_process_group")
    c.close()
    fake.reset(0)
    c = cchan.Comm.from_process_group(platform="cuda", device=0)
    made(c, 0, "set_device(0), from_process_group(device=0)")
    c.close()
    # vLLM's workers: set_device(local_rank), then CustomAllreduce(group) with device None
    fake.reset(LOCAL % NGPU)
    ar = cchan.CustomAllreduce(dist.group.WORLD)
    if SIZE in ar._SUPPORTED_WORLD_SIZES:
        expect(ar.device == cuda(LOCAL % NGPU) and ar.comm.device == ar.device,
               f"CustomAllreduce(group): device {ar.device}, comm {ar.comm and ar.comm.device}")
    ar.close()


def case_device_given():
    """device= wins over both, and becomes torch's current device."""
    d = (LOCAL + 2) % NGPU
    for dev in (d, f"cuda:{d}", cuda(d)):
        fake.reset((LOCAL + 1) % NGPU)
        c = cchan.Comm.from_process_group(platform="cuda", device=dev)
        made(c, d, f"device={dev!r}")
        c.close()


def case_no_hard_coded_gpu():
    """The tests, examples and benchmarks make tensors on comm.device (or a device derived from
    it), never on a GPU of their own: 'cuda:0', torch.device('cuda', 0), .cuda() or a bare
    'cuda' (torch's current device: the communicator's only until something moves it)."""
    if RANK != 0:
        return
    bad = re.compile(r"""["']cuda:\d["']|device\(\s*["']cuda["']\s*,\s*\d\s*\)"""
                     r"""|\.cuda\(\s*\d?\s*\)|device\s*=\s*["']cuda["']"""
                     r"""|device\(\s*["']cuda["']\s*\)""")
    files = sorted(glob.glob(os.path.join(HERE, "*.py")) +
                   glob.glob(os.path.join(ROOT, "python", "examples", "*.py")) +
                   glob.glob(os.path.join(ROOT, "python", "bench", "*.py")))
    expect(len(files) >= 4, f"found {len(files)} files to scan")
    for f in files:
        if os.path.samefile(f, __file__):
            continue
        with open(f, encoding="utf-8") as fh:
            hits = [f"{n}: {m.group(0)}" for n, line in enumerate(fh, 1)
                    for m in [bad.search(line.split("#", 1)[0])] if m]
        expect(not hits, f"{os.path.relpath(f, ROOT)}: a hard-coded GPU at lines {hits}: make "
               f"tensors on comm.device")


CASES = [case_local_ranks, case_no_launcher, case_every_constructor, case_subgroup,
         case_application_chose, case_device_given, case_no_hard_coded_gpu]

saved_cuda = fake.install()
saved = (ccomm.cuda_built, _lib.core)
ccomm.cuda_built = lambda: True
_lib.core = lambda: lib
try:
    for case in CASES:
        before = len(failures)
        try:
            case()
        except Exception:  # noqa: BLE001 - report and go on (the cases' collectives are balanced)
            failures.append(f"{case.__name__}: {traceback.format_exc()}")
            print(f"[r{RANK}] FAIL: {case.__name__} raised:\n{traceback.format_exc()}", flush=True)
        # every rank's verdict: a rank other than 0 simulates other local ranks
        n = torch.tensor([len(failures) - before], dtype=torch.int64)
        dist.all_reduce(n)
        if RANK == 0:
            print(f"{'ok  ' if int(n) == 0 else 'FAIL'} {case.__name__[5:]}"
                  f"{f' ({int(n)} failures over all ranks)' if int(n) else ''}", flush=True)
finally:
    for n, f in saved_cuda.items():
        setattr(torch.cuda, n, f)
    ccomm.cuda_built, _lib.core = saved

v = torch.tensor([len(failures)], dtype=torch.int64)
dist.all_reduce(v)
if RANK == 0:
    try:
        os.unlink(store)
    except OSError:
        pass
    print(f"test_device ({SIZE} ranks, {NGPU} GPUs faked): {checks[0]} checks on rank 0, "
          f"{int(v)} failures over all ranks")
dist.destroy_process_group()
sys.exit(1 if int(v) else 0)
