/* cchan ibverbs at run time: the one symbol table through which the ib transport calls libibverbs,
 * filled by dlopen/dlsym (optional_libs.c opens the library), so libcchan has no link-time
 * dependency on it and works, saying why, where it is absent. Also: choosing a NIC and port, and
 * registering GPU memory (dma-buf first, then peer memory). Not installed.
 *
 * The data path (ibv_post_send, ibv_poll_cq) is inline in <infiniband/verbs.h>: it calls the
 * provider through the context's ops and needs no symbol. */
#ifndef CCHAN_SRC_PROXY_IBV_H
#define CCHAN_SRC_PROXY_IBV_H

#if defined(CCHAN_ENABLE_IBVERBS) && defined(__has_include)
#if __has_include(<infiniband/verbs.h>)
#define CCHANI_HAVE_IBV_HEADERS 1
#endif
#endif

#include "runtime.h"

/* 1 when libibverbs loads and lists at least one RDMA device (what CCHAN_TRANSPORT_AUTO asks for
 * a peer on another host), else 0. */
CCHANI_HIDDEN int cchani_ibv_usable(void);

#if defined(CCHANI_HAVE_IBV_HEADERS)
#include <infiniband/verbs.h>

typedef struct cchani_ibv {
    struct ibv_device **(*get_device_list)(int *num_devices);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int (*close_device)(struct ibv_context *context);
    int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
    /* NULL before rdma-core 34 (no dma-buf registration). */
    struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t length,
                                    uint64_t iova, int fd, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    const char *(*wc_status_str)(enum ibv_wc_status status);
} cchani_ibv_t;

/* The table, loaded once. CCHAN_ERR_UNSUPPORTED (with the reason) when libibverbs does not load or
 * lacks a required symbol. */
CCHANI_HIDDEN int cchani_ibv_load(const cchani_ibv_t **out);

/* A NIC port for a channel of comm: CCHAN_IB_HCA ("name[:port][,name[:port]...]") restricts the
 * candidates; among active ports, the NIC nearest the comm's GPU in the PCI tree (longest common
 * sysfs path), ties and the host platform spread by local rank. CCHAN_ERR_NO_DEVICE when none.
 * *dev is an entry of *list, which the caller frees with free_device_list. */
CCHANI_HIDDEN int cchani_ibv_pick(const cchani_ibv_t *ibv, cchan_comm_t *comm,
                                  struct ibv_device ***list, struct ibv_device **dev,
                                  uint8_t *port);

/* The GID index to use: CCHAN_IB_GID_INDEX, else on Ethernet (RoCE) the first RoCE v2 GID that
 * maps an IPv4 address, else the first RoCE v2 GID, else 0; on InfiniBand 0. */
CCHANI_HIDDEN int cchani_ibv_gid_index(const cchani_ibv_t *ibv, struct ibv_context *ctx,
                                       const char *dev_name, uint8_t port, int link_layer,
                                       int *index);

/* Registers [ptr, ptr + bytes) for the NIC: host memory with ibv_reg_mr; GPU memory (device >= 0)
 * as a dma-buf (cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr), else through the peer-memory
 * module (ibv_reg_mr on the device pointer). what names the buffer in errors. */
CCHANI_HIDDEN int cchani_ibv_reg(const cchani_ibv_t *ibv, struct ibv_pd *pd, void *ptr,
                                 size_t bytes, int device, int access, const char *what,
                                 struct ibv_mr **out);
#endif /* CCHANI_HAVE_IBV_HEADERS */

#endif /* CCHAN_SRC_PROXY_IBV_H */
