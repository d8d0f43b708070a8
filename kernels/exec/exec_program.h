/* cchan_exec: the compiled form of a plan that the interpreter reads (host and device). Plain data,
 * no pointers inside the operation lists, so one rank's lists upload to the device as one block of
 * memory: [exec_block_t x nblocks][exec_op_t x nops][exec_ref_t x nrefs]. */
#ifndef CCHAN_EXEC_PROGRAM_H
#define CCHAN_EXEC_PROGRAM_H

#include <stdint.h>

#include "cchan/arch/arch.h"

CCHAN_EXTERN_C_BEGIN

#define EXEC_MAX_SRCS 8
#define EXEC_MAX_CHANNELS 64 /* per rank */
#define EXEC_MAX_BLOCKS 128
#define EXEC_MAX_OPS 65536 /* per rank */
#define EXEC_MAX_RANKS 64
#define EXEC_MAX_INSTANCES 64

enum exec_buf { EXEC_BUF_INPUT = 0, EXEC_BUF_OUTPUT = 1, EXEC_BUF_SCRATCH = 2, EXEC_NBUF = 3 };
enum exec_chan_type { EXEC_CH_MEMORY = 0, EXEC_CH_PORT = 1, EXEC_CH_SWITCH = 2 };
enum exec_proto { EXEC_PROTO_SIMPLE = 0, EXEC_PROTO_LL8 = 1, EXEC_PROTO_LL16 = 2 };

typedef enum exec_opcode {
    EXEC_OP_PUT = 0,
    EXEC_OP_PUT_SIGNAL,
    EXEC_OP_PUT_SIGNAL_FLUSH,
    EXEC_OP_GET,
    EXEC_OP_SIGNAL,
    EXEC_OP_WAIT,
    EXEC_OP_FLUSH,
    EXEC_OP_PUT_PACKETS,
    EXEC_OP_READ_PACKETS,
    EXEC_OP_REDUCE_PACKETS,
    EXEC_OP_COPY,
    EXEC_OP_REDUCE,
    EXEC_OP_REDUCE_PUT,
    EXEC_OP_SWITCH_REDUCE,
    EXEC_OP_SWITCH_BROADCAST,
    EXEC_OP_BARRIER,
    EXEC_OP_SEM_RELEASE,
    EXEC_OP_SEM_ACQUIRE,
    EXEC_OP_SYNC,
    EXEC_OP_LOOP,
    EXEC_OP_COUNT
} exec_opcode_t;

/* Chunks chunk, chunk + stride, ... (count of them) of buffer `buf`; ch >= 0: the peer's, through
 * this rank's channel ch. */
typedef struct exec_ref {
    uint32_t chunk;
    uint32_t count;
    uint32_t stride;
    uint8_t buf;
    uint8_t reserved;
    int16_t ch;
} exec_ref_t;

typedef struct exec_op {
    uint8_t op; /* exec_opcode_t */
    uint8_t nsrc;
    uint8_t ndst;
    uint8_t proto; /* packet ops: EXEC_PROTO_LL8 / LL16 */
    int16_t ch;    /* -1: none */
    int16_t sem;   /* -1: none */
    uint16_t tbg_index, tbg_size;
    uint16_t body; /* loop */
    uint16_t reserved;
    uint32_t ref; /* first ref (srcs, then dsts) in the rank's ref array */
} exec_op_t;

typedef struct exec_block {
    uint32_t op_first, nops;
    uint32_t ref_first, nrefs;
} exec_block_t;

CCHAN_EXTERN_C_END

#endif /* CCHAN_EXEC_PROGRAM_H */
