/* Stands for a framework library that needs NCCL (libtorch_cuda.so): it links libnccl.so.2 and
 * test_nccl_foreign loads it, so that its RUNPATH is there to search when the shim looks for its
 * fallback. */
#include "nccl_abi.h"

int needs_nccl_version(void);
int needs_nccl_version(void) {
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess ? v : -1;
}
