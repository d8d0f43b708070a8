/* nccl.h's facts (the toolkit's header). */
#include <stddef.h>

#include <nccl.h>

#include "nccl_abi_facts.h"

const long long cchan_nccl_facts_sys[] = {CCHAN_NCCL_ABI_FACTS(CCHAN_NCCL_FACT_VALUE)};
