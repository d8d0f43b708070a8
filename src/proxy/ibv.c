/* cchan ibverbs at run time: symbol table, NIC choice, GID choice, memory registration (ibv.h). */
#include "ibv.h"

#if defined(CCHANI_HAVE_IBV_HEADERS)
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(CCHAN_HAVE_CUDA)
#include <ctype.h>
#include <cuda_runtime_api.h>
#endif

static const char *const where = "ib transport";

/* ---------------------------------------------------------------- the symbol table */

static cchani_ibv_t table;
static int table_status;
static char table_why[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_load(void) {
    void *h = cchani_optional_lib_open("ibverbs", table_why, sizeof table_why);
    if (!h) {
        table_status = CCHAN_ERR_UNSUPPORTED;
        return;
    }
    const char *missing = NULL;
#define CCHANI_IBV_SYM(field, symbol, required)                                                    \
    do {                                                                                           \
        *(void **)&table.field = dlsym(h, symbol);                                                 \
        if (!table.field && (required) && !missing) missing = symbol;                              \
    } while (0)
    CCHANI_IBV_SYM(get_device_list, "ibv_get_device_list", 1);
    CCHANI_IBV_SYM(free_device_list, "ibv_free_device_list", 1);
    CCHANI_IBV_SYM(get_device_name, "ibv_get_device_name", 1);
    CCHANI_IBV_SYM(open_device, "ibv_open_device", 1);
    CCHANI_IBV_SYM(close_device, "ibv_close_device", 1);
    CCHANI_IBV_SYM(query_device, "ibv_query_device", 1);
    CCHANI_IBV_SYM(query_port, "ibv_query_port", 1);
    CCHANI_IBV_SYM(query_gid, "ibv_query_gid", 1);
    CCHANI_IBV_SYM(alloc_pd, "ibv_alloc_pd", 1);
    CCHANI_IBV_SYM(dealloc_pd, "ibv_dealloc_pd", 1);
    CCHANI_IBV_SYM(reg_mr, "ibv_reg_mr", 1);
    CCHANI_IBV_SYM(reg_dmabuf_mr, "ibv_reg_dmabuf_mr", 0);
    CCHANI_IBV_SYM(dereg_mr, "ibv_dereg_mr", 1);
    CCHANI_IBV_SYM(create_cq, "ibv_create_cq", 1);
    CCHANI_IBV_SYM(destroy_cq, "ibv_destroy_cq", 1);
    CCHANI_IBV_SYM(create_qp, "ibv_create_qp", 1);
    CCHANI_IBV_SYM(modify_qp, "ibv_modify_qp", 1);
    CCHANI_IBV_SYM(destroy_qp, "ibv_destroy_qp", 1);
    CCHANI_IBV_SYM(wc_status_str, "ibv_wc_status_str", 1);
#undef CCHANI_IBV_SYM
    if (missing) {
        snprintf(table_why, sizeof table_why, "libibverbs.so.1 lacks %s", missing);
        table_status = CCHAN_ERR_UNSUPPORTED;
    }
}

int cchani_ibv_load(const cchani_ibv_t **out) {
    pthread_once(&table_once, table_load);
    if (table_status)
        return cchani_error(table_status, where, "libibverbs is not usable here: %s", table_why);
    *out = &table;
    return 0;
}

int cchani_ibv_usable(void) {
    const cchani_ibv_t *ibv;
    if (cchani_ibv_load(&ibv)) {
        cchani_clear_error();
        return 0;
    }
    int n = 0;
    struct ibv_device **list = ibv->get_device_list(&n);
    if (list) ibv->free_device_list(list);
    return n > 0;
}

/* ---------------------------------------------------------------- choosing a NIC */

typedef struct candidate {
    struct ibv_device *dev;
    uint8_t port;
    size_t affinity; /* common sysfs path prefix with the GPU */
} candidate_t;

/* Whether `name[:port]` is allowed by CCHAN_IB_HCA (NULL: everything). */
static int hca_allowed(const char *list, const char *name, uint8_t port) {
    if (!list) return 1;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= n && !strncmp(p, name, n) &&
            (len == n || (p[n] == ':' && (uint8_t)atoi(p + n + 1) == port)))
            return 1;
        p += len + (end ? 1 : 0);
    }
    return 0;
}

/* The real sysfs path of a device's PCI function ("" when unknown). */
static void device_path(const char *sysfs, char out[PATH_MAX]) {
    if (!realpath(sysfs, out)) out[0] = '\0';
}

static size_t common_prefix(const char *a, const char *b) {
    size_t n = 0;
    while (a[n] && a[n] == b[n]) n++;
    return n;
}

static void gpu_path(const cchan_comm_t *comm, char out[PATH_MAX]) {
    out[0] = '\0';
#if defined(CCHAN_HAVE_CUDA)
    if (comm->platform != CCHAN_PLATFORM_CUDA) return;
    char bus[32], sysfs[96];
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, comm->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    for (char *c = bus; *c; c++) *c = (char)tolower((unsigned char)*c);
    snprintf(sysfs, sizeof sysfs, "/sys/bus/pci/devices/%s", bus);
    device_path(sysfs, out);
#else
    (void)comm;
#endif
}

int cchani_ibv_pick(const cchani_ibv_t *ibv, cchan_comm_t *comm, struct ibv_device ***list_out,
                    struct ibv_device **dev_out, uint8_t *port_out) {
    const char *allow = cchani_env_str("CCHAN_IB_HCA");
    int n = 0;
    struct ibv_device **list = ibv->get_device_list(&n);
    if (!list || n == 0) {
        if (list) ibv->free_device_list(list);
        return cchani_error(CCHAN_ERR_NO_DEVICE, where,
                            "no RDMA device (ibv_get_device_list found none)");
    }
    char gpu[PATH_MAX];
    gpu_path(comm, gpu);
    candidate_t cand[64];
    int ncand = 0;
    size_t best = 0;
    for (int i = 0; i < n && ncand < 64; i++) {
        const char *name = ibv->get_device_name(list[i]);
        struct ibv_context *ctx = ibv->open_device(list[i]);
        if (!ctx) continue;
        struct ibv_device_attr attr;
        memset(&attr, 0, sizeof attr);
        if (ibv->query_device(ctx, &attr) == 0) {
            for (uint8_t port = 1; port <= attr.phys_port_cnt && ncand < 64; port++) {
                struct ibv_port_attr pa;
                memset(&pa, 0, sizeof pa);
                if (ibv->query_port(ctx, port, &pa) || pa.state != IBV_PORT_ACTIVE ||
                    !hca_allowed(allow, name, port))
                    continue;
                char sysfs[256], path[PATH_MAX];
                snprintf(sysfs, sizeof sysfs, "/sys/class/infiniband/%s/device", name);
                device_path(sysfs, path);
                cand[ncand].dev = list[i];
                cand[ncand].port = port;
                cand[ncand].affinity = gpu[0] && path[0] ? common_prefix(gpu, path) : 0;
                if (cand[ncand].affinity > best) best = cand[ncand].affinity;
                ncand++;
            }
        }
        ibv->close_device(ctx);
    }
    if (ncand == 0) {
        ibv->free_device_list(list);
        return cchani_error(CCHAN_ERR_NO_DEVICE, where, "%d RDMA device(s), but no active port%s%s",
                            n, allow ? " allowed by CCHAN_IB_HCA=" : "", allow ? allow : "");
    }
    /* The nearest NICs; local ranks that share a GPU distance spread over them. */
    candidate_t *nearest[64];
    int nn = 0;
    for (int i = 0; i < ncand; i++)
        if (cand[i].affinity == best) nearest[nn++] = &cand[i];
    int local = comm->local_rank >= 0 ? comm->local_rank : 0;
    candidate_t *c = nearest[local % nn];
    *list_out = list;
    *dev_out = c->dev;
    *port_out = c->port;
    return 0;
}

/* ---------------------------------------------------------------- GID */

static int gid_type_is_v2(const char *dev, uint8_t port, int index) {
    char path[256], type[32] = {0};
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%u/gid_attrs/types/%d", dev, port,
             index);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    if (!fgets(type, sizeof type, f)) type[0] = '\0';
    fclose(f);
    return strstr(type, "v2") != NULL;
}

int cchani_ibv_gid_index(const cchani_ibv_t *ibv, struct ibv_context *ctx, const char *dev_name,
                         uint8_t port, int link_layer, int *index) {
    int64_t forced;
    int r = cchani_env_i64("CCHAN_IB_GID_INDEX", -1, &forced);
    if (r) return r;
    if (forced >= 0) {
        *index = (int)forced;
        return 0;
    }
    *index = 0;
    if (link_layer != IBV_LINK_LAYER_ETHERNET) return 0;
    struct ibv_port_attr pa;
    memset(&pa, 0, sizeof pa);
    if (ibv->query_port(ctx, port, &pa)) return 0;
    int first_v2 = -1;
    static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    for (int i = 0; i < pa.gid_tbl_len && i < 256; i++) {
        union ibv_gid gid;
        if (ibv->query_gid(ctx, port, i, &gid)) continue;
        static const uint8_t zero[16];
        if (!memcmp(gid.raw, zero, 16) || !gid_type_is_v2(dev_name, port, i)) continue;
        if (first_v2 < 0) first_v2 = i;
        if (!memcmp(gid.raw, v4_prefix, 12)) {
            *index = i;
            return 0;
        }
    }
    if (first_v2 >= 0) *index = first_v2;
    return 0;
}

/* ---------------------------------------------------------------- registration */

#if defined(CCHAN_HAVE_CUDA)
/* cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD), through the runtime's
 * driver entry points so that libcchan does not link libcuda. */
typedef int (*get_handle_fn)(void *handle, unsigned long long dptr, size_t size, int type,
                             unsigned long long flags);
#define CCHANI_DMA_BUF_FD 1

static int gpu_dmabuf_fd(void *ptr, size_t bytes, int *fd, uint64_t *offset) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSuccess;
    if (cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn, 11070,
                                         cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !fn) {
        (void)cudaGetLastError();
        return CCHAN_ERR_UNSUPPORTED;
    }
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t base = (uintptr_t)ptr & ~(page - 1);
    uintptr_t end = ((uintptr_t)ptr + bytes + page - 1) & ~(page - 1);
    int handle = -1;
    if (((get_handle_fn)fn)(&handle, (unsigned long long)base, end - base, CCHANI_DMA_BUF_FD, 0) !=
            0 ||
        handle < 0)
        return CCHAN_ERR_UNSUPPORTED;
    *fd = handle;
    *offset = (uintptr_t)ptr - base;
    return 0;
}
#endif

int cchani_ibv_reg(const cchani_ibv_t *ibv, struct ibv_pd *pd, void *ptr, size_t bytes, int device,
                   int access, const char *what, struct ibv_mr **out) {
    struct ibv_mr *mr = NULL;
    if (device < 0) {
        mr = ibv->reg_mr(pd, ptr, bytes, access);
        if (!mr)
            return cchani_error(-errno ? -errno : CCHAN_ERR_SYSTEM, where,
                                "ibv_reg_mr of %s (%zu bytes at %p): errno %d (%s)", what, bytes,
                                ptr, errno, strerror(errno));
        *out = mr;
        return 0;
    }
#if defined(CCHAN_HAVE_CUDA)
    int fd = -1;
    uint64_t offset = 0;
    int dmabuf_errno = 0;
    if (ibv->reg_dmabuf_mr && gpu_dmabuf_fd(ptr, bytes, &fd, &offset) == 0) {
        mr = ibv->reg_dmabuf_mr(pd, offset, bytes, (uint64_t)(uintptr_t)ptr, fd, access);
        dmabuf_errno = mr ? 0 : errno;
        close(fd); /* the registration holds the dma-buf */
    }
    if (!mr) mr = ibv->reg_mr(pd, ptr, bytes, access); /* nvidia-peermem */
    if (!mr)
        return cchani_error(-EFAULT, where,
                            "registering %s (%zu bytes of GPU %d memory at %p): dma-buf %s, "
                            "peer memory (ibv_reg_mr) errno %d: is nvidia-peermem loaded?",
                            what, bytes, device, ptr,
                            ibv->reg_dmabuf_mr
                                ? (dmabuf_errno ? strerror(dmabuf_errno) : "unavailable")
                                : "unsupported by this libibverbs",
                            errno);
    *out = mr;
    return 0;
#else
    return cchani_error(CCHAN_ERR_UNSUPPORTED, where, "%s is GPU memory and this build has no CUDA",
                        what);
#endif
}

#else
int cchani_ibv_usable(void) { return 0; }
#endif /* CCHANI_HAVE_IBV_HEADERS */
