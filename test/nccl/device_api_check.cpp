// The shim's declarations of the device API's host functions (src/nccl/nccl_abi.h, which spells
// out the types itself) against NCCL's C++ headers: compiled with both, a mismatch is an error.
#include <nccl.h>
#include <nccl_device/core.h>
#include <nccl_device/gin_barrier.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>

#define CCHAN_NCCL_SYSTEM_HEADER 1
#define CCHAN_NCCL_SYSTEM_DEVICE_HEADER 1
#include "nccl_abi.h"

static_assert(sizeof(ncclTeam_t) == 3 * sizeof(int), "ncclTeam_t is three ints, passed by value");

// Each function as a pointer of the type the shim declares: taken from NCCL's declaration.
#define CCHAN_NCCL_POINTER(ret, name, params, args) ret(*const check_##name) params = &name;
CCHAN_NCCL_DEVICE_FUNCS(CCHAN_NCCL_POINTER)
CCHAN_NCCL_FUNCS(CCHAN_NCCL_POINTER)

int main() { return 0; }
