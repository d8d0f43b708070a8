"""cchan.Comm: a cchan communicator from the launcher's environment, a torch.distributed process
group or a unique id."""

import contextlib
import ctypes
import datetime
import operator
import os
import re
import threading
import weakref

from . import _lib
from ._lib import CchanError, check
from ._torch import ClosedError, torch

_PLATFORMS = {"host": _lib.PLATFORM_HOST, "cpu": _lib.PLATFORM_HOST, "cuda": _lib.PLATFORM_CUDA}


def unique_id():
    """A new unique id (bytes, 128): made on one process, given to every rank with its rank and the
    size (Comm.from_unique_id); the root listens at the address it names."""
    uid = _lib.UniqueId()
    check(_lib.core().cchan_get_unique_id(ctypes.byref(uid)), "cchan_get_unique_id")
    return bytes(uid.internal)


def cuda_built():
    """Whether libcchan was built with CUDA (cchan_version() lists "cuda", not "no cuda")."""
    v = _lib.core().cchan_version().decode()
    feats = v[v.find("(") + 1:v.rfind(")")] if "(" in v else ""
    return "cuda" in [f.strip() for f in feats.split(",")]


# Deadline of device-side waits when neither timeout_ms nor CCHAN_TIMEOUT_MS sets one: ranks that
# disagree on a call's shape then fail instead of waiting forever. Ten minutes, like
# torch.distributed's NCCL default: long enough for ranks that arrive late (checkpoints,
# compilation), short enough that a mismatch is not mistaken for a slow job.
DEFAULT_TIMEOUT_MS = 600_000

# The C config's 64-bit field; its largest value means "take CCHAN_TIMEOUT_MS".
_TIMEOUT_MAX = _lib.TIMEOUT_FROM_ENV - 1


def _check_timeout(timeout_ms):
    """timeout_ms as an int, or None; ValueError naming it where the C field cannot hold it (a
    value past 64 bits would wrap, 2**64 to 0: no deadline)."""
    if timeout_ms is None:
        return None
    try:
        v = operator.index(timeout_ms)
    except TypeError:
        v = None
    if v is None or not 0 <= v <= _TIMEOUT_MAX:
        raise ValueError(f"timeout_ms: expected None or an int in [0, 2**64 - 2] (milliseconds; "
                         f"0: no deadline), got {timeout_ms!r}")
    return v


def _resolve_timeout(timeout_ms):
    """What the C config gets: the caller's value, else CCHAN_TIMEOUT_MS (the library reads it),
    else DEFAULT_TIMEOUT_MS."""
    if timeout_ms is not None:
        return timeout_ms
    if os.environ.get("CCHAN_TIMEOUT_MS", ""):
        return None
    return DEFAULT_TIMEOUT_MS


# The integer forms the C library accepts in the environment (docs/environment.md): decimal, 0x
# hex or 0 octal, the whole text.
_ENV_INT = re.compile(r"(0[xX][0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*)")


def _env_int(name):
    """The variable as the C library reads it, or None where it is unset, empty or malformed (the
    library then fails its own call, naming it)."""
    s = os.environ.get(name, "")
    m = _ENV_INT.fullmatch(s)
    if not m:
        return None
    return int(s, 16 if m.group(1) else 8 if m.group(2) else 10)


def _deadline_ms(timeout_ms):
    """The deadline a communicator made with timeout_ms (checked) will have: 0 for none, None
    where CCHAN_TIMEOUT_MS is malformed."""
    t = _resolve_timeout(timeout_ms)
    return _env_int("CCHAN_TIMEOUT_MS") if t is None else t


# CCHAN_BOOTSTRAP_TIMEOUT_MS's default and largest value (docs/environment.md).
_BOOT_DEFAULT_MS = 30_000
_BOOT_MAX_MS = 86_400_000
# Serializes this package's temporary setting of CCHAN_BOOTSTRAP_TIMEOUT_MS (below).
_BOOT_ENV_LOCK = threading.RLock()


@contextlib.contextmanager
def _bootstrap_deadline(timeout_ms):
    """While a communicator's bootstrap is made: a bootstrap deadline no longer than the
    communicator's own. The bootstrap fixes its deadline when it is made, from
    CCHAN_BOOTSTRAP_TIMEOUT_MS (default 30 s), and every host-side wait of the communicator is a
    bootstrap step (barrier(), check_args' agreement, the collective steps of the create and
    destroy calls): without this a caller's deadline of 3 s left a barrier waiting 30 s. The C API
    takes the bootstrap's deadline from the environment only, so the variable is set for the
    create call and restored after it (under a lock, against this package's other threads)."""
    deadline = _deadline_ms(timeout_ms)
    boot = _env_int("CCHAN_BOOTSTRAP_TIMEOUT_MS")
    if os.environ.get("CCHAN_BOOTSTRAP_TIMEOUT_MS", "") and boot is None:
        deadline = None  # malformed: left for the bootstrap to refuse, naming it
    if not deadline or deadline >= (_BOOT_DEFAULT_MS if boot is None else boot):
        yield  # no deadline, or one no shorter than the bootstrap's
        return
    with _BOOT_ENV_LOCK:
        old = os.environ.get("CCHAN_BOOTSTRAP_TIMEOUT_MS")
        os.environ["CCHAN_BOOTSTRAP_TIMEOUT_MS"] = str(min(deadline, _BOOT_MAX_MS))
        try:
            yield
        finally:
            if old is None:
                del os.environ["CCHAN_BOOTSTRAP_TIMEOUT_MS"]
            else:
                os.environ["CCHAN_BOOTSTRAP_TIMEOUT_MS"] = old


def timeout_to_ms(timeout):
    """A torch.distributed timeout as a communicator's timeout_ms: a datetime.timedelta, seconds
    (int or float), or an options object holding one (`_timeout`, `timeout`: torch's
    ProcessGroup.Options, _DistributedBackendOptions); None where it holds none. Rounded up to
    whole ms and at least 1 (0 would mean no deadline), at most the C field's largest."""
    for attr in ("_timeout", "timeout"):
        inner = getattr(timeout, attr, None)
        if inner is not None and not callable(inner):
            timeout = inner
            break
    if isinstance(timeout, datetime.timedelta):
        ms = -(-timeout // datetime.timedelta(milliseconds=1))
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        ms = int(-(-timeout * 1000 // 1))
    else:
        return None
    return min(max(ms, 1), _TIMEOUT_MAX)


def group_timeout_ms(group=None):
    """The timeout a torch.distributed process group was made with (None: the default group), in
    ms, where this torch exposes it, else None. Ours keep it (ProcessGroupCchan); gloo and nccl
    groups show it in `options._timeout` (torch 1.13 and 2.x), torch 2.x groups of several
    backends in each backend's options."""
    try:
        import torch.distributed as dist

        if group is None:
            group = dist.distributed_c10d._get_default_group()
        ms = timeout_to_ms(getattr(group, "_timeout", None))
        if ms is None:
            ms = timeout_to_ms(getattr(group, "options", None))
        for dev in ("cuda", "cpu"):
            if ms is not None or not hasattr(group, "_get_backend"):
                break
            try:
                ms = timeout_to_ms(getattr(group._get_backend(torch.device(dev)), "options", None))
            except (RuntimeError, ValueError, TypeError, AttributeError):
                pass  # no backend for this device
        return ms
    except (ImportError, RuntimeError, ValueError, TypeError, AttributeError):
        return None  # not initialized, or a torch that exposes none of these: Comm's default


def _resolve_platform(platform):
    if platform is None or platform == "auto":
        return "cuda" if torch.cuda.is_available() and cuda_built() else "host"
    if platform not in _PLATFORMS:
        raise ValueError(f"platform: expected 'auto', 'host' or 'cuda', got {platform!r}")
    if platform == "cuda" and not torch.cuda.is_available():
        raise ValueError("platform: 'cuda' asked for, but torch sees no CUDA device")
    if platform == "cuda" and not cuda_built():
        raise ValueError(f"platform: 'cuda' asked for, but libcchan was built without CUDA "
                         f"({_lib.core().cchan_version().decode()})")
    return "host" if platform == "cpu" else platform


# The launchers' local-rank variables, in the bootstrap's order (src/host/bootstrap_env.c): this
# process's rank among the job's processes on this host, whatever group a communicator spans.
_LOCAL_RANK_VARS = ("CCHAN_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                    "MPI_LOCALRANKID", "SLURM_LOCALID")


def _cuda_device(device, local_rank):
    """The CUDA ordinal a communicator runs on, by one rule for every constructor, so that the
    communicators of a process and the tensors its application makes share one GPU: the device
    given; else torch's current device where the application chose one (torch.cuda.set_device:
    the current device is not 0, where torch starts); else the launcher's local rank (local_rank
    where no launcher names one) modulo the GPUs torch sees.

    Not the current device alone: in a process that chose none it is 0 on every rank, so every
    rank's communicator would run on GPU 0 while the launcher's local rank (Comm()) names another.
    Not the bootstrap's local rank first: over a subgroup (ranks {2, 3} of a host's four) it
    counts the group's ranks (0, 1), another process's GPU."""
    ndev = torch.cuda.device_count()
    if device is not None:
        dev = device if isinstance(device, int) else torch.device(device).index
        if dev is None or not 0 <= dev < ndev:
            raise ValueError(f"device: expected a CUDA ordinal in [0, {ndev}), got {device!r}")
        return dev
    cur = torch.cuda.current_device()
    if cur != 0:
        return cur
    lr = env_local_rank()
    return max(local_rank if lr is None else lr, 0) % ndev


class Comm:
    """A cchan communicator: every rank of a job, one process each.

        comm = cchan.Comm()                                  # torchrun, Open MPI, Slurm, cchan-run
        comm = cchan.Comm.from_process_group(group)          # the id broadcast over the group
        comm = cchan.Comm.from_unique_id(uid, rank, size)    # uid from cchan.unique_id()

    platform: 'auto' (CUDA where torch sees a GPU and the library was built with CUDA, else the
    host backend: CPU threads over shared memory), 'host' or 'cuda'. device: the GPU ordinal on
    CUDA (an int, 'cuda:N' or a torch.device); None takes torch's current device where the
    application chose one (torch.cuda.set_device), else the launcher's local rank modulo the GPUs
    torch sees, by the same rule in every constructor; either way it becomes torch's current
    device, and `comm.device` is the GPU the C library runs on. timeout_ms: the deadline in ms, 0
    for none; default (None): CCHAN_TIMEOUT_MS where set, else DEFAULT_TIMEOUT_MS, ten minutes
    (from_process_group: the group's timeout first, where torch shows it); `comm.timeout_ms` is
    the one in force. It bounds every device-side wait, and the host-side ones too (barrier(),
    check_args' agreement, the collective steps of create and close calls: bootstrap steps,
    whose own deadline, CCHAN_BOOTSTRAP_TIMEOUT_MS or 30 s, is lowered to it where it is
    shorter), so no call waits for a peer longer than timeout_ms (a bootstrap step's non-root
    ranks wait up to 1.5 times as long, for the root's report of who is missing).
    check_args (default: CCHAN_PY_CHECK_ARGS=1 in the environment): before each collective or MoE
    call, the ranks compare the call's shape over the bootstrap (a host all-gather) and all raise
    ValueError naming the argument where they disagree, instead of waiting for data that never
    comes (a device-wait timeout) or reducing mismatched buffers.

    close() (or leaving a `with` block) destroys the objects made on the communicator (collectives,
    MoE buffers, registrations; collective calls, so every rank closes); memory from cchan.empty()
    stays valid while tensors view it, and the C communicator goes when the last of it does.
    """

    def __init__(self, platform="auto", device=None, timeout_ms=None, *, check_args=None,
                 _bootstrap=None):
        timeout_ms = _check_timeout(timeout_ms)
        lib = _lib.core()
        if check_args is None:
            check_args = os.environ.get("CCHAN_PY_CHECK_ARGS", "0") not in ("", "0")
        self.check_args = bool(check_args)
        self._ptr = None
        self._closed = False
        self._children = []  # weak references to objects to close with the communicator
        self._live_mem = 0  # cchan.empty() allocations still viewed by tensors
        bs = ctypes.c_void_p()
        if _bootstrap is None:
            with _bootstrap_deadline(timeout_ms):
                check(lib.cchan_bootstrap_create_from_env(ctypes.byref(bs)),
                      "cchan_bootstrap_create_from_env")
        else:
            bs = _bootstrap
        try:
            plat = _resolve_platform(platform)
            local_rank = lib.cchan_bootstrap_local_rank(bs)
            dev = -1
            if plat == "cuda":
                # The C library is given the ordinal (never -1, its own choice from the
                # bootstrap's local rank), so comm.device below is the GPU chosen here; made
                # current so that tensors made on "cuda" and the current stream are on it.
                dev = _cuda_device(device, local_rank)
                torch.cuda.set_device(dev)
            elif device is not None and torch.device(device).type != "cpu":
                raise ValueError(f"device: the host platform runs on the CPU, got {device!r}")
            cfg = _lib.comm_config(_PLATFORMS[plat], dev, _resolve_timeout(timeout_ms))
            out = ctypes.c_void_p()
            with _bootstrap_deadline(timeout_ms):  # its memory exchange reads the variable too
                check(lib.cchan_comm_create(bs, ctypes.byref(cfg), ctypes.byref(out)),
                      "cchan_comm_create")
        except BaseException:
            lib.cchan_bootstrap_destroy(bs)
            raise
        self._ptr = out
        self.timeout_ms = int(cfg.timeout_ms)
        if self.timeout_ms == _lib.TIMEOUT_FROM_ENV:
            self.timeout_ms = int(lib.cchan_env_timeout_ms())
        self.rank = lib.cchan_comm_rank(out)
        self.size = lib.cchan_comm_size(out)
        self.local_rank = lib.cchan_bootstrap_local_rank(bs)
        self.local_size = lib.cchan_bootstrap_local_size(bs)
        self.platform = "cuda" if lib.cchan_comm_platform(out) == _lib.PLATFORM_CUDA else "host"
        self.device = (torch.device("cuda", lib.cchan_comm_device(out))
                       if self.platform == "cuda" else torch.device("cpu"))

    # ---------------------------------------------------------------- constructors

    @classmethod
    def from_env(cls, platform="auto", device=None, timeout_ms=None, check_args=None):
        """From the launcher's variables (torchrun, Open MPI, MPICH/PMI, Slurm, cchan-run)."""
        return cls(platform, device, timeout_ms, check_args=check_args)

    @classmethod
    def from_unique_id(cls, uid, rank, size, platform="auto", device=None, timeout_ms=None,
                       check_args=None):
        _check_timeout(timeout_ms)  # before the bootstrap: the other ranks would wait for it
        if not isinstance(uid, (bytes, bytearray)) or len(uid) != 128:
            n = len(uid) if hasattr(uid, "__len__") else "?"
            raise ValueError(f"uid: expected the 128 bytes of cchan.unique_id(), got "
                             f"{type(uid).__name__} of length {n}")
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size: expected a positive int, got {size!r}")
        if not isinstance(rank, int) or not 0 <= rank < size:
            raise ValueError(f"rank: expected an int in [0, {size}), got {rank!r}")
        u = _lib.UniqueId()
        ctypes.memmove(u.internal, bytes(uid), 128)
        bs = ctypes.c_void_p()
        with _bootstrap_deadline(timeout_ms):
            check(_lib.core().cchan_bootstrap_create(ctypes.byref(u), rank, size,
                                                     ctypes.byref(bs)),
                  "cchan_bootstrap_create")
        return cls(platform, device, timeout_ms, check_args=check_args, _bootstrap=bs)

    @classmethod
    def from_process_group(cls, group=None, platform="auto", device=None, timeout_ms=None,
                           check_args=None):
        """Collective over a torch.distributed process group (None: the default group): rank 0 of
        the group makes the unique id and broadcasts it over the group (gloo: a CPU tensor, nccl:
        a CUDA tensor). device None: as Comm's, where no launcher names a local rank the
        global rank modulo the GPUs (torch.distributed's guess); never the rank in the group,
        which for a subgroup names another process's GPU. timeout_ms None: the group's timeout
        (init_process_group's or new_group's `timeout`, which the caller gave torch) where torch
        shows it (group_timeout_ms), else as Comm's."""
        import torch.distributed as dist

        _check_timeout(timeout_ms)
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("group: torch.distributed is not initialized "
                             "(call torch.distributed.init_process_group first)")
        g = group if group is not None else dist.group.WORLD
        if timeout_ms is None:
            timeout_ms = group_timeout_ms(g)
        rank, size = dist.get_rank(g), dist.get_world_size(g)
        plat = _resolve_platform(platform)
        if plat == "cuda":
            # Chosen before the broadcast (an nccl group's goes through this GPU). The bootstrap
            # made from the id would count the group's ranks as local ranks: the global rank
            # stands in where no launcher names one.
            device = _cuda_device(device, dist.get_rank())
        backend = dist.get_backend(g)
        dev = torch.device("cpu")
        if backend == "nccl":
            dev = torch.device("cuda", device if plat == "cuda" else torch.cuda.current_device())
        buf = torch.zeros(128, dtype=torch.uint8)
        if rank == 0:
            buf.copy_(torch.tensor(list(unique_id()), dtype=torch.uint8))
        t = buf.to(dev)
        src = dist.get_global_rank(g, 0) if hasattr(dist, "get_global_rank") else \
            dist.distributed_c10d._get_global_rank(g, 0)
        dist.broadcast(t, src=src, group=g)
        uid = bytes(t.cpu().tolist())
        return cls.from_unique_id(uid, rank, size, plat, device, timeout_ms, check_args)

    # ---------------------------------------------------------------- state

    @property
    def closed(self):
        return self._closed

    @property
    def handle(self):
        """The cchan_comm_t * as an int (for C extensions)."""
        self.check_open()
        return self._ptr.value

    def check_open(self, name="comm"):
        if self._closed:
            raise ClosedError(f"{name}: the communicator is closed (expected an open cchan.Comm)")

    def barrier(self):
        self.check_open()
        lib = _lib.core()
        check(lib.cchan_bootstrap_barrier(lib.cchan_comm_bootstrap(self._ptr)),
              "cchan_bootstrap_barrier")

    def check_device(self):
        """Raises CchanError naming an expired device-side wait, if any."""
        self.check_open()
        check(_lib.core().cchan_comm_check_device(self._ptr), "cchan_comm_check_device")

    def agree(self, name, what, values, describe):
        """Collective (host): every rank's `values` (up to 8 ints) for the call `what`; raises
        ValueError naming `name` on every rank where they differ. describe(values) -> text."""
        vals = list(values) + [0] * (8 - len(values))
        mine = (ctypes.c_int64 * 8)(*vals)
        allv = (ctypes.c_int64 * (8 * self.size))()
        lib = _lib.core()
        check(lib.cchan_bootstrap_allgather(lib.cchan_comm_bootstrap(self._ptr), mine, allv, 64),
              "cchan_bootstrap_allgather")
        rows = [tuple(allv[8 * r:8 * r + 8]) for r in range(self.size)]
        if any(r != rows[0] for r in rows):
            diff = "; ".join(f"rank {r}: {describe(rows[r][:len(values)])}"
                             for r in range(self.size))
            raise ValueError(f"{name}: the ranks disagree on {what} (every rank must pass the same "
                             f"shape and dtype): {diff}")

    def _adopt(self, obj):
        self._children.append(weakref.ref(obj))

    def _mem_acquired(self):
        self._live_mem += 1

    def _mem_released(self):
        self._live_mem -= 1
        if self._closed and self._live_mem == 0:
            self._destroy()

    def _destroy(self):
        if self._ptr is not None:
            st = _lib.core().cchan_comm_destroy(self._ptr)
            if st == 0:
                self._ptr = None

    def close(self):
        """Collective: destroys the collectives, MoE buffers and registrations made on this
        communicator (in the order they were made), then the communicator (once no tensor from
        cchan.empty() is left)."""
        if self._closed:
            return
        errors = []
        for ref in self._children:
            obj = ref()
            if obj is not None:
                try:
                    obj.close()
                except CchanError as e:
                    errors.append(e)
        self._children = []
        self._closed = True
        if self._live_mem == 0:
            self._destroy()
        if errors:
            raise errors[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        # Not collective here: only the C communicator, when nothing else holds it.
        try:
            if not self._closed and self._ptr is not None and not self._children \
                    and self._live_mem == 0:
                self._closed = True
                self._destroy()
        except Exception:  # noqa: BLE001
            pass

    def __repr__(self):
        state = "closed" if self._closed else f"{self.platform}, device {self.device}"
        return f"cchan.Comm(rank {self.rank} of {self.size}, {state})"

    # ---------------------------------------------------------------- collectives (cchan.coll)

    def _collectives(self):
        from .coll import _comm_coll

        return _comm_coll(self)

    def all_reduce(self, t, out=None):
        """out = sum over ranks of t (out=None: a new tensor; out=t: in place)."""
        return self._collectives().all_reduce(t, out=out)

    def all_gather(self, t, out=None):
        """out[r * n:(r + 1) * n] = rank r's t along dim 0 (out=None: a new tensor)."""
        return self._collectives().all_gather(t, out=out)

    def reduce_scatter(self, t, out=None):
        """out = this rank's 1/size of the sum over ranks of t along dim 0."""
        return self._collectives().reduce_scatter(t, out=out)

    def load_plans(self, folder_or_files):
        """Collective: execution plans (a folder, a file or a list) for the collectives'
        selector; choose() and last_choice() of self._collectives() say what runs."""
        return self._collectives().load_plans(folder_or_files)

    def choose(self, op, nbytes, dtype, inplace=False, root=0):
        """What an automatic op call of nbytes of dtype runs, and why (cchan_coll_choose)."""
        return self._collectives().choose(op, nbytes, dtype, inplace=inplace, root=root)


def env_local_rank():
    """The local rank the launcher's environment names (this process's rank among the job's on
    this host), or None."""
    for v in _LOCAL_RANK_VARS:
        s = os.environ.get(v, "")
        if s:
            try:
                return int(s)
            except ValueError:
                raise ValueError(f"{v}: expected the launcher's local rank (an int), got "
                                 f"{s!r}") from None
    return None


def env_rank():
    """The rank the launcher's environment names, or None (for scripts choosing what to run)."""
    for v in ("CCHAN_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        if v in os.environ:
            return int(os.environ[v])
    return None
