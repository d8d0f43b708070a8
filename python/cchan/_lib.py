"""ctypes bindings of the cchan C libraries: the only module that knows their symbols and structs.

Each C header has one section here (cchan.h, cchan_coll.h, cchan_moe.h, cchan_exec.h), so a
change of a C signature or struct is one edit in this file. Nothing here imports torch.

Where the libraries are looked for, first hit wins:
  0. the package's own _libs folder (a wheel from `make wheel` carries the libraries there, so
     the package and the libraries it was built with go together);
  1. CCHAN_LIBRARY_PATH: directories separated by ':' (each searched for libcchan.so,
     libcchan_coll.so, libcchan_moe.so, libcchan_exec.so, or their soname files lib*.so.0, also in
     its kernels/coll, kernels/moe and kernels/exec subfolders, so a build tree's top directory is
     enough);
  2. the paths written at `make install` into _install_paths.py (the installed prefix's libdir);
  3. a build tree next to this source tree (<repo>/build), when the package runs from the source;
  4. the directories above the package (a prefix such as $PREFIX/lib/python3.11/site-packages/cchan
     -> $PREFIX/lib), and the lib folder next to the bin folder of `cchan-run` on PATH;
  5. the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache: /usr/local/lib after
     ldconfig).
"""

import ctypes
import errno as _errno
import os
import threading

from ctypes import (
    POINTER,
    Structure,
    c_char_p,
    c_int,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)

# ------------------------------------------------------------------ errors


class CchanError(RuntimeError):
    """A C call of cchan failed: `status` is its negative status, `call` the C function, `message`
    the library's last-error text (what failed and why)."""

    def __init__(self, call, status, message):
        self.call = call
        self.status = status
        self.message = message
        super().__init__(f"{call} failed: {status_name(status)} ({status}): {message}")


# cchan/status.h
CCHAN_ERR_INTERNAL = -256
CCHAN_ERR_TIMEOUT = -257
CCHAN_ERR_PEER = -258
CCHAN_ERR_VERSION = -259
CCHAN_ERR_PROTOCOL = -260
CCHAN_ERR_CUDA = -261
CCHAN_ERR_UNSUPPORTED = -262
CCHAN_ERR_NO_DEVICE = -263
CCHAN_ERR_DEVICE_TIMEOUT = -264
CCHAN_ERR_IN_PROGRESS = -265
CCHAN_ERR_NO_RESOURCE = -266
CCHAN_ERR_RANGE = -267
CCHAN_ERR_SYSTEM = -268


def status_name(status):
    lib = _core_or_none()
    if lib is not None:
        try:
            return lib.cchan_strerror(status).decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 - naming an error must never raise
            pass
    if -status in _errno.errorcode:
        return _errno.errorcode[-status]
    return "cchan status"


# ------------------------------------------------------------------ loading

_LIB_NAMES = {
    "core": "libcchan.so",
    "coll": "libcchan_coll.so",
    "moe": "libcchan_moe.so",
    "exec": "libcchan_exec.so",
}
# lib*.so is the development link; a wheel and a runtime-only install have only the soname file.
_ALT_NAMES = {kind: [name + ".0"] for kind, name in _LIB_NAMES.items()}
_SUBDIRS = {"core": ["", "lib"], "coll": ["", "kernels/coll", "lib"],
            "moe": ["", "kernels/moe", "lib"], "exec": ["", "kernels/exec", "lib"]}
_lock = threading.Lock()
_loaded = {}


def _search_dirs():
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [os.path.join(here, "_libs")]
    env = os.environ.get("CCHAN_LIBRARY_PATH", "")
    dirs += [d for d in env.split(":") if d]
    try:
        from . import _install_paths  # written by `make install`

        dirs += list(getattr(_install_paths, "LIBDIRS", []))
    except ImportError:
        pass
    repo = os.path.dirname(os.path.dirname(here))  # <repo>/python/cchan -> <repo>
    if os.path.isfile(os.path.join(repo, "include", "cchan", "cchan.h")):
        dirs.append(os.path.join(repo, "build"))
    p = here
    for _ in range(5):
        p = os.path.dirname(p)
        dirs.append(p)
    import shutil

    run = shutil.which("cchan-run")
    if run:
        dirs.append(os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(run))), "lib"))
    return dirs


def _find(kind):
    name = _LIB_NAMES[kind]
    tried = []
    for d in _search_dirs():
        for sub in _SUBDIRS[kind]:
            for n in [name] + _ALT_NAMES.get(kind, []):
                path = os.path.join(d, sub, n) if sub else os.path.join(d, n)
                tried.append(path)
                if os.path.isfile(path):
                    return path, tried
    return name, tried  # the dynamic loader's own search


def _load(kind):
    with _lock:
        if kind in _loaded:
            return _loaded[kind]
        if kind != "core":
            _load_locked_core()
        path, tried = _find(kind)
        try:
            # RTLD_GLOBAL: the kernel libraries' dependency on libcchan.so.0 resolves to this copy.
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise ImportError(
                f"cchan: cannot load {_LIB_NAMES[kind]} ({e}); looked in the package's _libs, "
                f"CCHAN_LIBRARY_PATH, the installed prefix, the build tree and the loader's path: "
                f"set CCHAN_LIBRARY_PATH to the directory holding it (a build tree such as "
                f"<repo>/build, or $PREFIX/lib). "
                f"Tried: {', '.join(tried[:8])}{' ...' if len(tried) > 8 else ''}"
            ) from None
        _PROTOTYPES[kind](lib)
        lib._cchan_path = path
        _loaded[kind] = lib
        return lib


def _load_locked_core():
    if "core" not in _loaded:
        path, tried = _find("core")
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise ImportError(
                f"cchan: cannot load libcchan.so ({e}); set CCHAN_LIBRARY_PATH to the directory "
                f"holding it (a build tree such as <repo>/build, or $PREFIX/lib). Tried: "
                f"{', '.join(tried[:8])}{' ...' if len(tried) > 8 else ''}"
            ) from None
        _PROTOTYPES["core"](lib)
        lib._cchan_path = path
        _loaded["core"] = lib


def core():
    return _loaded.get("core") or _load("core")


def coll():
    return _loaded.get("coll") or _load("coll")


def moe():
    return _loaded.get("moe") or _load("moe")


def exec_():
    return _loaded.get("exec") or _load("exec")


def _core_or_none():
    return _loaded.get("core")


def library_paths():
    """The paths of the libraries loaded so far, by kind."""
    return {k: getattr(v, "_cchan_path", "?") for k, v in _loaded.items()}


def check(status, call, last_error=None):
    """Raises CchanError for a negative status; returns the status otherwise."""
    if status < 0:
        msg = ""
        try:
            fn = last_error or core().cchan_last_error
            msg = fn().decode("utf-8", "replace")
        except Exception:  # noqa: BLE001
            pass
        raise CchanError(call, status, msg)
    return status


# ------------------------------------------------------------------ cchan.h


class UniqueId(Structure):
    _fields_ = [("internal", c_uint8 * 128)]


# CCHAN_VERSION_CODE of the cchan.h these bindings match: the config structs below carry it, so a
# library older than the bindings refuses them (CCHAN_ERR_VERSION) instead of misreading fields
# it does not know. Bump it with the structs; test_import.py checks it against include/cchan.
CCHAN_VERSION_CODE = 100

PLATFORM_AUTO, PLATFORM_HOST, PLATFORM_CUDA, PLATFORM_HIP = 0, 1, 2, 3
CCHAN_COMM_CONFIG_MAGIC = 0x63636831
CCHAN_MEM_HOST = 0x1


class CommConfig(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("magic", c_uint32),
        ("version", c_uint32),
        ("platform", c_int),
        ("device", c_int),
        ("timeout_ms", c_uint64),
    ]


# cchan_comm_config_t.timeout_ms that means "take CCHAN_TIMEOUT_MS" (UINT64_MAX)
TIMEOUT_FROM_ENV = (1 << 64) - 1


def comm_config(platform=PLATFORM_AUTO, device=-1, timeout_ms=None):
    """CCHAN_COMM_CONFIG_INIT with the given fields."""
    cfg = CommConfig()
    cfg.size = ctypes.sizeof(CommConfig)
    cfg.magic = CCHAN_COMM_CONFIG_MAGIC
    cfg.version = CCHAN_VERSION_CODE
    cfg.platform = platform
    cfg.device = device
    cfg.timeout_ms = TIMEOUT_FROM_ENV if timeout_ms is None else int(timeout_ms)
    return cfg


def version_code():
    """The loaded library's CCHAN_VERSION_CODE."""
    return core().cchan_version_code()


def _core_prototypes(lib):
    P = c_void_p
    protos = {
        "cchan_version": (c_char_p, []),
        "cchan_version_code": (c_int, []),
        "cchan_env_timeout_ms": (c_uint64, []),
        "cchan_strerror": (c_char_p, [c_int]),
        "cchan_last_error": (c_char_p, []),
        "cchan_get_unique_id": (c_int, [POINTER(UniqueId)]),
        "cchan_bootstrap_create": (c_int, [POINTER(UniqueId), c_int, c_int, POINTER(P)]),
        "cchan_bootstrap_create_from_env": (c_int, [POINTER(P)]),
        "cchan_bootstrap_rank": (c_int, [P]),
        "cchan_bootstrap_size": (c_int, [P]),
        "cchan_bootstrap_local_rank": (c_int, [P]),
        "cchan_bootstrap_local_size": (c_int, [P]),
        "cchan_bootstrap_allgather": (c_int, [P, P, P, c_size_t]),
        "cchan_bootstrap_barrier": (c_int, [P]),
        "cchan_bootstrap_destroy": (c_int, [P]),
        "cchan_comm_create": (c_int, [P, POINTER(CommConfig), POINTER(P)]),
        "cchan_comm_destroy": (c_int, [P]),
        "cchan_comm_rank": (c_int, [P]),
        "cchan_comm_size": (c_int, [P]),
        "cchan_comm_platform": (c_int, [P]),
        "cchan_comm_device": (c_int, [P]),
        "cchan_comm_bootstrap": (P, [P]),
        "cchan_comm_set_timeout_ms": (c_int, [P, c_uint64]),
        "cchan_comm_check_device": (c_int, [P]),
        "cchan_mem_alloc": (c_int, [P, c_size_t, ctypes.c_uint, POINTER(P)]),
        "cchan_mem_register": (c_int, [P, P, c_size_t, ctypes.c_uint, POINTER(P)]),
        "cchan_mem_ptr": (P, [P]),
        "cchan_mem_size": (c_size_t, [P]),
        "cchan_mem_exchange": (c_int, [P, P, POINTER(P)]),
        "cchan_mem_destroy": (c_int, [P]),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


# ------------------------------------------------------------------ cchan_coll.h

COLL_F32, COLL_F16, COLL_BF16 = 0, 1, 2
COLL_ALLREDUCE, COLL_ALLGATHER, COLL_REDUCESCATTER, COLL_ALLTOALL, COLL_BROADCAST = 0, 1, 2, 3, 4
COLL_OPS = {"allreduce": 0, "allgather": 1, "reducescatter": 2, "alltoall": 3, "broadcast": 4}
COLL_AUTO = 0
COLL_PLAN = 100
CCHAN_COLL_CONFIG_MAGIC = 0x63636331


class CollConfig(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("magic", c_uint32),
        ("version", c_uint32),
        ("scratch_bytes", c_size_t),
        ("max_blocks", c_int),
    ]


def coll_config(scratch_bytes=0, max_blocks=0):
    cfg = CollConfig()
    cfg.size = ctypes.sizeof(CollConfig)
    cfg.magic = CCHAN_COLL_CONFIG_MAGIC
    cfg.version = CCHAN_VERSION_CODE
    cfg.scratch_bytes = scratch_bytes
    cfg.max_blocks = max_blocks
    return cfg


class CollAlgoInfo(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("algo", c_int),
        ("op", c_int),
        ("nranks", c_int),
        ("root", c_int),
        ("inplace", c_int),
        ("dtypes", c_uint32),
        ("min_bytes", c_uint64),
        ("max_bytes", c_uint64),
        ("granularity", c_uint64),
        ("ready", c_int),
    ]


class CollChoice(Structure):
    _fields_ = [
        ("algo", c_int),
        ("plan", c_char_p),
        ("from_table", c_int),
        ("why", ctypes.c_char * 256),
    ]


def _coll_prototypes(lib):
    P = c_void_p
    call = [P, P, P, c_size_t, c_int, c_int, P]
    protos = {
        "cchan_coll_create": (c_int, [P, POINTER(CollConfig), POINTER(P)]),
        "cchan_coll_destroy": (c_int, [P]),
        "cchan_coll_register": (c_int, [P, P, c_size_t]),
        "cchan_coll_deregister": (c_int, [P, P]),
        "cchan_coll_allreduce": (c_int, call),
        "cchan_coll_allgather": (c_int, call),
        "cchan_coll_reducescatter": (c_int, call),
        "cchan_coll_select": (c_int, [P, c_int, c_size_t]),
        "cchan_coll_algo_name": (c_char_p, [c_int]),
        "cchan_coll_load_plans": (c_int, [P, c_char_p]),
        "cchan_coll_load_tuning": (c_int, [P, c_char_p]),
        "cchan_coll_algos": (c_int, [P, POINTER(CollAlgoInfo), c_int]),
        "cchan_coll_choose": (c_int, [P, c_int, c_int, c_size_t, c_int, c_int, P, P,
                                      POINTER(CollChoice)]),
        "cchan_coll_last_choice": (c_int, [P, POINTER(CollChoice)]),
        "cchan_coll_last_error": (c_char_p, []),
        "cchan_coll_alltoall": (c_int, [P, P, P, c_size_t, c_int, P]),
        "cchan_coll_broadcast": (c_int, [P, P, P, c_size_t, c_int, c_int, P]),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


# ------------------------------------------------------------------ cchan_moe.h

MOE_LOW_LATENCY, MOE_HIGH_THROUGHPUT = 1, 2
MOE_BF16, MOE_FP8_E4M3 = 1, 2
CCHAN_MOE_CONFIG_MAGIC = 0x63636D31
CCHAN_MOE_CONFIG_VERSION = 1
MOE_MAX_RANKS = 8  # kernels/moe/moe_wire.h
MOE_MAX_TOPK = 16
MOE_LL_MAX_TOKENS = 4096
MOE_HT_MAX_TOKENS = 65535
MOE_SCALE_BLOCK = 128


class MoeConfig(Structure):
    _fields_ = [
        ("size", c_size_t),
        ("magic", c_uint32),
        ("version", c_uint32),
        ("mode", c_int),
        ("num_experts", c_int),
        ("hidden", c_int),
        ("top_k", c_int),
        ("max_tokens_per_rank", c_int),
        ("num_blocks", c_int),
        ("alloc", c_void_p),
        ("free", c_void_p),
        ("alloc_ctx", c_void_p),
    ]


def moe_config(mode, num_experts, hidden, top_k, max_tokens_per_rank, num_blocks=0):
    cfg = MoeConfig()
    cfg.size = ctypes.sizeof(MoeConfig)
    cfg.magic = CCHAN_MOE_CONFIG_MAGIC
    cfg.version = CCHAN_MOE_CONFIG_VERSION
    cfg.mode = mode
    cfg.num_experts = num_experts
    cfg.hidden = hidden
    cfg.top_k = top_k
    cfg.max_tokens_per_rank = max_tokens_per_rank
    cfg.num_blocks = num_blocks
    return cfg


class MoeInfo(Structure):
    _fields_ = [
        ("nranks", c_int),
        ("rank", c_int),
        ("local_experts", c_int),
        ("max_rows_per_expert", c_int),
        ("max_recv_rows", c_int),
        ("num_blocks", c_int),
        ("threads_per_block", c_int),
        ("comm_buffer_bytes", c_size_t),
        ("dispatch_region_bytes", c_size_t),
        ("combine_region_bytes", c_size_t),
    ]


class MoeDispatchArgs(Structure):
    _fields_ = [
        ("x", c_void_p),
        ("dtype", c_int),
        ("out_x", c_void_p),
        ("out_scales", c_void_p),
        ("out_counts", c_void_p),
        ("topk_weights", c_void_p),
        ("out_topk", c_void_p),
        ("out_weights", c_void_p),
    ]


def moe_ll_buffer_bytes(nranks, num_experts, hidden, top_k, max_tokens):
    """Upper bound of the low-latency group's communication buffer (cchan_moe_info_t
    comm_buffer_bytes), mirroring the layout computed in cchan_moe_group_create for both of its
    combine variants; the tests compare it with what a group reports."""

    def align(v):
        return (v + 127) // 128 * 128

    N, L, H, K, B = nranks, num_experts // nranks, hidden, top_k, max_tokens
    hdr = (8 + 4 * K + 15) // 16 * 16
    slot = hdr + H * 2
    best = 0
    for reduce in (0, 1):
        off_dcnt = align(N * 8)
        off_ccnt = align(off_dcnt + L * N * 8)
        off_wcnt = align(off_ccnt + (N * B if reduce else num_experts) * 8)
        off_cw = align(off_wcnt + N * 8)
        off_disp = align(off_cw + (N * B * K * 4 if reduce else 0))
        off_comb = align(off_disp + N * B * slot)
        comb = N * B * H * 4 if reduce else B * K * H * 2
        best = max(best, 2 * align(off_comb + comb))
    return best


def _moe_prototypes(lib):
    P = c_void_p
    protos = {
        "cchan_moe_group_create": (c_int, [P, POINTER(MoeConfig), POINTER(P)]),
        "cchan_moe_group_info": (c_int, [P, POINTER(MoeInfo)]),
        "cchan_moe_group_destroy": (c_int, [P]),
        "cchan_moe_handle_create": (c_int, [P, P, c_int, P, POINTER(P)]),
        "cchan_moe_handle_destroy": (c_int, [P]),
        "cchan_moe_handle_num_recv_tokens": (c_int, [P, P, POINTER(c_int)]),
        "cchan_moe_dispatch": (c_int, [P, POINTER(MoeDispatchArgs), c_int, P]),
        "cchan_moe_combine": (c_int, [P, P, P, P, c_int, P]),
        "cchan_moe_complete": (c_int, [P, P]),
        "cchan_moe_check": (c_int, [P]),
        "cchan_moe_last_error": (c_char_p, []),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


# ------------------------------------------------------------------ cchan_exec.h

EXEC_F32, EXEC_F16, EXEC_BF16 = 0, 1, 2
EXEC_SUM = 0
EXEC_COLLECTIVES = {0: "allreduce", 1: "allgather", 2: "reducescatter", 3: "alltoall",
                    4: "broadcast", 5: "custom"}


class ExecPlanInfo(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("collective", c_int),
        ("nranks", c_int),
        ("root", c_int),
        ("inplace", c_int),
        ("min_bytes", c_uint64),
        ("max_bytes", c_uint64),
        ("granularity", c_uint64),
        ("loop_unit", c_uint64),
        ("nblocks", c_uint32),
        ("in_chunks", c_uint32),
        ("out_chunks", c_uint32),
        ("uses_port", c_int),
        ("cross_block", c_int),
    ]


def _exec_prototypes(lib):
    P = c_void_p
    protos = {
        "cchan_exec_plan_load_file": (c_int, [c_char_p, POINTER(P)]),
        "cchan_exec_plan_load_string": (c_int, [c_char_p, c_size_t, POINTER(P)]),
        "cchan_exec_plan_free": (None, [P]),
        "cchan_exec_plan_info": (c_int, [P, POINTER(ExecPlanInfo)]),
        "cchan_exec_plan_fits": (c_int, [P, c_uint64]),
        "cchan_exec_create": (c_int, [P, P, POINTER(P)]),
        "cchan_exec_destroy": (c_int, [P]),
        "cchan_exec_register": (c_int, [P, P, c_size_t]),
        "cchan_exec_deregister": (c_int, [P, P]),
        "cchan_exec_run": (c_int, [P, P, P, c_size_t, c_int, c_int, P]),
        "cchan_exec_last_error": (c_char_p, []),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


_PROTOTYPES = {"core": _core_prototypes, "coll": _coll_prototypes, "moe": _moe_prototypes,
               "exec": _exec_prototypes}

__all__ = ["CchanError", "core", "coll", "moe", "check", "library_paths"]
