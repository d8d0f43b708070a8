/* The shim's facts (src/nccl/nccl_abi.h). */
#include <stddef.h>

#include "nccl_abi.h"
#include "nccl_abi_facts.h"

const long long cchan_nccl_facts_own[] = {CCHAN_NCCL_ABI_FACTS(CCHAN_NCCL_FACT_VALUE)};
