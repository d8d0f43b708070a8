/* cchan device API: include this in kernels (CUDA, HIP) or in host-backend C code. */
#ifndef CCHAN_DEVICE_H
#define CCHAN_DEVICE_H

#include "cchan/arch/arch.h"
#include "cchan/barrier.h"
#include "cchan/memory_channel.h"
#include "cchan/port_channel.h"
#include "cchan/status.h"
#include "cchan/switch_channel.h"

#endif /* CCHAN_DEVICE_H */
