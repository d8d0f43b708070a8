/* Switch channel on the host backend, every rank a process (cchan-run -n 2/4/8) whose group of CPU
 * threads acts as one thread block:
 *   - the handle: portable path, members, rank, every member's buffer mapped;
 *   - reduce of every type (f32, f16, bf16, i32, u32) over random data, element counts from 1 to
 *     tens of thousands (odd ones included), offsets that allow 16-byte vectors and offsets that do
 *     not, with local == buf and with a separate local buffer; results against a float64 reference
 *     within the type's tolerance (integers exact), poisoned guards on both sides untouched;
 *   - broadcast of every element size, each rank into its own slot of every member's buffer,
 *     checked bit for bit on every rank with the guards;
 *   - refusals, identical on every rank: the multicast opt-in where NCCL_NVLS_ENABLE=0 (it is
 *     refused before anything is created; this test forces the host platform as well, so no code
 *     path here can reach a multicast object), the opt-in on a host platform, a bad CCHAN_NVLS,
 *     unknown flags, buffers of different sizes;
 *   - destroy gives back every mapping and fd.
 *
 *   sw_ops [max_elems]   (default 20011); with more than CCHAN_SWITCH_MAX_MEMBERS ranks it checks
 *                        that creation is refused on every rank
 */
#include <math.h>

#include "../memory/mem_test.h"

#define THREADS 3
#define POISON 0x5au
#define GUARD 48
#define MAX_RANKS CCHAN_SWITCH_MAX_MEMBERS

enum sw_type { T_F32, T_F16, T_BF16, T_I32, T_U32, T_COUNT };
static const char *const type_name[T_COUNT] = {"f32", "f16", "bf16", "i32", "u32"};
static const uint32_t type_size[T_COUNT] = {4, 2, 2, 4, 4};

static cchan_comm_t *comm;
static int n, me;
static cchan_sem_set_t *sems;
static cchan_semaphore_t barrier_sems[MAX_RANKS - 1];

static void rank_barrier(void) { MT_OK(cchan_rank_barrier(barrier_sems, (uint32_t)(n - 1), 0)); }

/* ---------------------------------------------------------------- data */

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Element i of rank r's input for a case: floats in +-[0.25, 4) (f32 with full 24-bit mantissas),
 * integers anywhere in 32 bits (sums wrap). Stored as the type's bits. */
static uint32_t input_bits(int type, uint64_t seed, int r, uint64_t i) {
    uint64_t h = mix(seed ^ mix((uint64_t)r * 7919u + i * 0x9e3779b97f4a7c15ull));
    float mag = 0.25f + (float)(h & 0xffffffu) * (3.75f / 16777216.0f);
    float f = (h >> 63) ? -mag : mag;
    switch (type) {
    case T_F32: return cchan_f32_bits(f);
    case T_F16: return cchan_f32_to_f16(f).bits;
    case T_BF16: return cchan_f32_to_bf16(f).bits;
    default: return (uint32_t)(h >> 16);
    }
}

static double bits_value(int type, uint32_t b) {
    cchan_f16_t h;
    cchan_bf16_t bf;
    switch (type) {
    case T_F32: return (double)cchan_f32_from_bits(b);
    case T_F16: h.bits = (uint16_t)b; return (double)cchan_f16_to_f32(h);
    case T_BF16: bf.bits = (uint16_t)b; return (double)cchan_bf16_to_f32(bf);
    case T_I32: return (double)(int32_t)b;
    default: return (double)b;
    }
}

static void put_elem(uint8_t *p, int type, uint32_t b) {
    if (type_size[type] == 2) {
        uint16_t v = (uint16_t)b;
        memcpy(p, &v, 2);
    } else {
        memcpy(p, &b, 4);
    }
}

static uint32_t get_elem(const uint8_t *p, int type) {
    if (type_size[type] == 2) {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Unit in the last place of the type at magnitude |x|. */
static double ulp(int type, double x) {
    int e;
    frexp(fabs(x) > 0 ? fabs(x) : 1e-30, &e); /* |x| in [2^(e-1), 2^e) */
    int mant = type == T_F32 ? 24 : type == T_F16 ? 11 : 8;
    double u = ldexp(1.0, e - mant);
    double min_sub = type == T_F32   ? ldexp(1.0, -149)
                     : type == T_F16 ? ldexp(1.0, -24)
                                     : ldexp(1.0, -133);
    return u > min_sub ? u : min_sub;
}

/* ---------------------------------------------------------------- reduce */

typedef struct red_case {
    const cchan_switch_channel_t *ch;
    int type;
    uint64_t dst_off, src_off, bytes;
} red_case_t;

static void reduce_group(mt_group_t *g, uint32_t tid) {
    const red_case_t *c = g->arg;
    switch (c->type) {
    case T_F32:
        cchan_switch_channel_reduce_f32(c->ch, c->dst_off, c->src_off, c->bytes, tid, THREADS);
        break;
    case T_F16:
        cchan_switch_channel_reduce_f16(c->ch, c->dst_off, c->src_off, c->bytes, tid, THREADS);
        break;
    case T_BF16:
        cchan_switch_channel_reduce_bf16(c->ch, c->dst_off, c->src_off, c->bytes, tid, THREADS);
        break;
    case T_I32:
        cchan_switch_channel_reduce_i32(c->ch, c->dst_off, c->src_off, c->bytes, tid, THREADS);
        break;
    default:
        cchan_switch_channel_reduce_u32(c->ch, c->dst_off, c->src_off, c->bytes, tid, THREADS);
        break;
    }
}

static int cases_run;

static void reduce_case(const cchan_switch_channel_t *ch, int type, uint64_t count,
                        uint64_t src_off, uint64_t dst_off, uint64_t seed) {
    const uint32_t es = type_size[type];
    const uint64_t bytes = count * es;
    uint8_t *buf = ch->member[me], *local = ch->local;
    MT_CHECK(src_off + bytes <= ch->buf_bytes);
    MT_CHECK(dst_off >= GUARD && dst_off + bytes + GUARD <= ch->local_bytes);
    /* Inputs written and destinations poisoned everywhere before anyone reduces. When local is buf,
     * the destination lies after the source (the caller keeps them apart). */
    memset(local + dst_off - GUARD, POISON, bytes + 2 * GUARD);
    for (uint64_t i = 0; i < count; i++)
        put_elem(buf + src_off + i * es, type, input_bits(type, seed, me, i));
    rank_barrier();
    red_case_t c = {ch, type, dst_off, src_off, bytes};
    mt_group_run(THREADS, reduce_group, &c);
    rank_barrier(); /* nobody rewrites its input before every reduce is done */

    for (uint64_t i = 0; i < count; i++) {
        uint32_t got = get_elem(local + dst_off + i * es, type);
        if (type == T_I32 || type == T_U32) {
            uint32_t want = 0;
            for (int r = 0; r < n; r++) want += input_bits(type, seed, r, i);
            if (got != want) {
                fprintf(stderr,
                        "rank %d: reduce_%s of %llu elements (src_off %llu, dst_off %llu): element "
                        "%llu is %u, want %u\n",
                        me, type_name[type], (unsigned long long)count, (unsigned long long)src_off,
                        (unsigned long long)dst_off, (unsigned long long)i, got, want);
                exit(1);
            }
            continue;
        }
        double ref = 0, mag = 0;
        for (int r = 0; r < n; r++) {
            double v = bits_value(type, input_bits(type, seed, r, i));
            ref += v;
            mag += fabs(v);
        }
        /* one rounding to the type, plus the f32 accumulation's own error bound */
        double tol = 0.5 * ulp(type, ref) + (double)(n - 1) * ldexp(mag, -24);
        double v = bits_value(type, got);
        if (!(fabs(v - ref) <= tol)) {
            fprintf(stderr,
                    "rank %d: reduce_%s of %llu elements (src_off %llu, dst_off %llu): element "
                    "%llu is %.9g, reference %.9g (tolerance %.3g)\n",
                    me, type_name[type], (unsigned long long)count, (unsigned long long)src_off,
                    (unsigned long long)dst_off, (unsigned long long)i, v, ref, tol);
            exit(1);
        }
    }
    for (uint64_t i = 0; i < GUARD; i++) {
        MT_CHECK(local[dst_off - GUARD + i] == POISON);
        MT_CHECK(local[dst_off + bytes + i] == POISON);
    }
    cases_run++;
}

/* ---------------------------------------------------------------- broadcast */

typedef struct bc_case {
    const cchan_switch_channel_t *ch;
    int type;
    uint64_t dst_off, src_off, bytes;
} bc_case_t;

static void broadcast_group(mt_group_t *g, uint32_t tid) {
    const bc_case_t *c = g->arg;
    switch (c->type) {
    case T_F32:
        cchan_switch_channel_broadcast_f32(c->ch, c->dst_off, c->src_off, c->bytes, tid, THREADS);
        break;
    case T_F16:
        cchan_switch_channel_broadcast_f16(c->ch, c->dst_off, c->src_off, c->bytes, tid, THREADS);
        break;
    case T_BF16:
        cchan_switch_channel_broadcast_bf16(c->ch, c->dst_off, c->src_off, c->bytes, tid, THREADS);
        break;
    case T_I32:
        cchan_switch_channel_broadcast_i32(c->ch, c->dst_off, c->src_off, c->bytes, tid, THREADS);
        break;
    default:
        cchan_switch_channel_broadcast_u32(c->ch, c->dst_off, c->src_off, c->bytes, tid, THREADS);
        break;
    }
}

/* Rank r broadcasts `count` elements into slot r (at dst_base + r * slot) of every member's buf. */
static void broadcast_case(const cchan_switch_channel_t *ch, int type, uint64_t count,
                           uint64_t src_off, uint64_t dst_base, uint64_t slot, uint64_t seed) {
    const uint32_t es = type_size[type];
    const uint64_t bytes = count * es;
    uint8_t *buf = ch->member[me], *local = ch->local;
    MT_CHECK(bytes + 2 * GUARD <= slot && dst_base + (uint64_t)n * slot <= ch->buf_bytes);
    memset(buf + dst_base, POISON, (uint64_t)n * slot);
    for (uint64_t i = 0; i < count; i++)
        put_elem(local + src_off + i * es, type, input_bits(type, seed, me, i));
    rank_barrier(); /* every member's slots poisoned */
    bc_case_t c = {ch, type, dst_base + (uint64_t)me * slot + GUARD, src_off, bytes};
    mt_group_run(THREADS, broadcast_group, &c);
    rank_barrier(); /* every broadcast landed */
    for (int r = 0; r < n; r++) {
        const uint8_t *s = buf + dst_base + (uint64_t)r * slot;
        for (uint64_t i = 0; i < GUARD; i++)
            MT_CHECK(s[i] == POISON && s[GUARD + bytes + i] == POISON);
        for (uint64_t i = 0; i < count; i++) {
            uint32_t got = get_elem(s + GUARD + i * es, type), want = input_bits(type, seed, r, i);
            if (got != want) {
                fprintf(stderr,
                        "rank %d: broadcast_%s of %llu elements from rank %d (src_off %llu): "
                        "element %llu is 0x%x, want 0x%x\n",
                        me, type_name[type], (unsigned long long)count, r,
                        (unsigned long long)src_off, (unsigned long long)i, got, want);
                exit(1);
            }
        }
    }
    rank_barrier(); /* checks done before the next case poisons */
    cases_run++;
}

/* ---------------------------------------------------------------- refusals */

static void refusals(cchan_mem_t *buf) {
    cchan_switch_channel_t ch;
    cchan_switch_t *sw = NULL;
    MT_FAILS(cchan_switch_channel_create(comm, buf, NULL, 0x80u, &ch, &sw), -EINVAL,
             "unknown flags");

    setenv("NCCL_NVLS_ENABLE", "0", 1);
    MT_FAILS(cchan_switch_channel_create(comm, buf, NULL, CCHAN_SWITCH_MULTICAST, &ch, &sw),
             CCHAN_ERR_UNSUPPORTED, "NCCL_NVLS_ENABLE=0");
    setenv("CCHAN_NVLS", "1", 1);
    MT_FAILS(cchan_switch_channel_create(comm, buf, NULL, 0, &ch, &sw), CCHAN_ERR_UNSUPPORTED,
             "NCCL_NVLS_ENABLE=0");
    setenv("CCHAN_NVLS", "2", 1);
    MT_FAILS(cchan_switch_channel_create(comm, buf, NULL, 0, &ch, &sw), -EINVAL, "CCHAN_NVLS=2");
    unsetenv("CCHAN_NVLS");
    /* Still refused without NCCL_NVLS_ENABLE=0: this communicator is on the host platform. */
    unsetenv("NCCL_NVLS_ENABLE");
    MT_FAILS(cchan_switch_channel_create(comm, buf, NULL, CCHAN_SWITCH_MULTICAST, &ch, &sw),
             CCHAN_ERR_UNSUPPORTED, "platform is not CUDA");
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    MT_CHECK(sw == NULL);

    /* Buffers of different sizes: rank 0 passes a smaller one; every rank fails. */
    cchan_mem_t *odd = NULL;
    MT_OK(cchan_mem_alloc(comm, me == 0 ? 4096 : 8192, 0, &odd));
    MT_FAILS(cchan_switch_channel_create(comm, odd, NULL, 0, &ch, &sw), -EINVAL, "same size");
    MT_OK(cchan_mem_destroy(odd));
    MT_CHECK(strcmp(cchan_switch_path_name(CCHAN_SWITCH_PATH_PORTABLE), "portable") == 0);
    MT_CHECK(strcmp(cchan_switch_path_name(CCHAN_SWITCH_PATH_MULTICAST), "multicast") == 0);
    MT_CHECK(strcmp(cchan_switch_path_name(77), "unknown") == 0);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv) {
    const uint64_t max_elems = argc > 1 ? strtoull(argv[1], NULL, 0) : 20011;
    /* No path in this program may reach a multicast object: host platform, and the machine-wide
     * refusal set as well. */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    unsetenv("CCHAN_NVLS");
    double t0 = mt_now_s();
    const int fds0 = mt_open_fds(), maps0 = mt_cchan_mappings();
    comm = mt_comm();
    n = cchan_comm_size(comm);
    me = cchan_comm_rank(comm);
    MT_OK(cchan_comm_set_timeout_ms(comm, 60000));
    if (n > CCHAN_SWITCH_MAX_MEMBERS) { /* sw_too_many: refused alike on every rank */
        cchan_mem_t *b = NULL;
        cchan_switch_channel_t ch;
        cchan_switch_t *sw = NULL;
        MT_OK(cchan_mem_alloc(comm, 4096, 0, &b));
        MT_FAILS(cchan_switch_channel_create(comm, b, NULL, 0, &ch, &sw), CCHAN_ERR_RANGE,
                 "at most 8 members");
        mt_barrier(comm);
        MT_OK(cchan_mem_destroy(b));
        MT_OK(cchan_comm_destroy(comm));
        printf("rank %d: sw_ops ok: %d ranks refused\n", me, n);
        return 0;
    }
    MT_OK(cchan_sem_set_create(comm, 1, 0, &sems));
    for (int p = 0, k = 0; p < n; p++)
        if (p != me) MT_OK(cchan_sem_set_get(sems, p, 0, &barrier_sems[k++]));

    const uint64_t span = max_elems * 4 + 64;                         /* one operand region */
    const uint64_t slot = (max_elems * 4 + 2 * GUARD + 63) / 64 * 64; /* one broadcast slot */
    const uint64_t buf_bytes = 2 * span + (uint64_t)n * slot + 4096;
    cchan_mem_t *buf = NULL, *local = NULL;
    MT_OK(cchan_mem_alloc(comm, buf_bytes, 0, &buf));
    MT_OK(cchan_mem_alloc(comm, span + 4096, 0, &local));

    refusals(buf);

    cchan_switch_channel_t sep, same;
    cchan_switch_t *sw_sep = NULL, *sw_same = NULL;
    MT_OK(cchan_switch_channel_create(comm, buf, local, 0, &sep, &sw_sep));
    MT_OK(cchan_switch_channel_create(comm, buf, NULL, 0, &same, &sw_same));
    MT_CHECK(sep.path == CCHAN_SWITCH_PATH_PORTABLE && same.path == CCHAN_SWITCH_PATH_PORTABLE);
    MT_CHECK(sep.nmembers == (uint32_t)n && sep.rank == (uint32_t)me && sep.mc == NULL);
    MT_CHECK(sep.member[me] == (uint8_t *)cchan_mem_ptr(buf) && sep.local == cchan_mem_ptr(local));
    MT_CHECK(same.local == cchan_mem_ptr(buf) && sep.buf_bytes == cchan_mem_size(buf));
    for (int r = 0; r < n; r++) MT_CHECK(sep.member[r] != NULL);
    /* Every member's mapping reaches that member's memory: each rank stamps its own buffer. */
    memcpy(sep.member[me] + buf_bytes - 8, &(uint64_t){0xc0de0000ull + (uint64_t)me}, 8);
    rank_barrier();
    for (int r = 0; r < n; r++) {
        uint64_t v;
        memcpy(&v, sep.member[r] + buf_bytes - 8, 8);
        MT_CHECK(v == 0xc0de0000ull + (uint64_t)r);
    }
    rank_barrier();

    static const uint64_t counts[] = {1,  2,  3,  4,  5,  7,  8,   9,    15,  16,
                                      17, 31, 33, 63, 64, 65, 257, 1023, 4099};
    uint64_t seed = 1;
    for (int t = 0; t < T_COUNT; t++) {
        const uint64_t es = type_size[t];
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            uint64_t c = counts[k];
            /* aligned, head-and-tail (both misaligned alike), mismatched (element by element) */
            reduce_case(&sep, t, c, 0, 64, seed++);
            reduce_case(&sep, t, c, 3 * es, 64 + 3 * es, seed++);
            reduce_case(&sep, t, c, es, 64, seed++);
            reduce_case(&same, t, c, 16, span + 64, seed++);
            broadcast_case(&sep, t, c, es, 2 * span, slot, seed++);
            broadcast_case(&sep, t, c, 0, 2 * span, slot, seed++);
        }
        reduce_case(&sep, t, max_elems, 0, 64, seed++);
        reduce_case(&same, t, max_elems, es, span + 64 + es, seed++);
        broadcast_case(&sep, t, max_elems, 0, 2 * span, slot, seed++);
    }

    MT_OK(cchan_comm_check_device(comm));
    MT_OK(cchan_switch_destroy(sw_same));
    MT_OK(cchan_switch_destroy(sw_sep));
    MT_OK(cchan_sem_set_destroy(sems));
    mt_barrier(comm);
    MT_OK(cchan_mem_destroy(local));
    MT_OK(cchan_mem_destroy(buf));
    MT_OK(cchan_comm_destroy(comm));
    MT_CHECK(mt_open_fds() == fds0);
    MT_CHECK(mt_cchan_mappings() == maps0);
    printf("rank %d: sw_ops ok, %d cases on %d ranks (%.1f s)\n", me, cases_run, n,
           mt_now_s() - t0);
    return 0;
}
