/* cchan communicator: platform and device choice, the device-failure record, and what every rank
 * knows about every other. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "gpu.h"
#include "runtime.h"

/* ---------------------------------------------------------------- identity */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = (const uint8_t *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Host name plus boot id, so that two containers (or rebooted machines) that share a host name do
 * not look like one host to fd passing and shared memory. The name is cchani_host_name's, so the
 * topology override (CCHAN_HOST_SPLIT, CCHAN_HOST_ID) makes one machine several hosts here too. */
static int host_hash(const cchan_comm_t *comm, char hostname[64], uint64_t *out) {
    int r = cchani_host_name(comm->rank, comm->nranks, hostname, NULL);
    if (r) return r;
    uint64_t h = fnv1a(0xcbf29ce484222325ull, hostname, strlen(hostname));
    char boot_id[64] = {0};
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, boot_id, sizeof boot_id - 1);
        close(fd);
        if (n > 0) h = fnv1a(h, boot_id, (size_t)n);
    }
    *out = h;
    return 0;
}

uint64_t cchani_random_u64(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
        v = cchani_now_ns() ^ ((uint64_t)getpid() << 32);
    return v;
}

/* ---------------------------------------------------------------- configuration */

static int check_config(const cchan_comm_config_t *cfg) {
    const char *where = "cchan_comm_create";
    if (cfg->size < offsetof(cchan_comm_config_t, timeout_ms) + sizeof cfg->timeout_ms)
        return cchani_error(-EINVAL, where,
                            "config size %zu is too small (use CCHAN_COMM_CONFIG_INIT)", cfg->size);
    /* Every field this library knows is read; a longer struct is from a newer cchan and would
     * carry settings it cannot honour. */
    if (cfg->size > sizeof *cfg)
        return cchani_error(CCHAN_ERR_VERSION, where,
                            "config size %zu is larger than this library's %zu (a config from a "
                            "newer cchan; use CCHAN_COMM_CONFIG_INIT)",
                            cfg->size, sizeof *cfg);
    if (cfg->magic != CCHAN_COMM_CONFIG_MAGIC)
        return cchani_error(-EINVAL, where,
                            "config magic 0x%08x is not 0x%08x (use CCHAN_COMM_CONFIG_INIT)",
                            cfg->magic, CCHAN_COMM_CONFIG_MAGIC);
    if (cfg->version == 0 || cfg->version > CCHAN_VERSION_CODE)
        return cchani_error(CCHAN_ERR_VERSION, where, "config version %u; this library is %d",
                            cfg->version, CCHAN_VERSION_CODE);
    return 0;
}

static int resolve_platform(cchan_platform_t want, int ngpus, cchan_platform_t *out) {
    const char *where = "cchan_comm_create";
    switch (want) {
    case CCHAN_PLATFORM_AUTO:
        *out = ngpus > 0 ? CCHAN_PLATFORM_CUDA : CCHAN_PLATFORM_HOST;
        return 0;
    case CCHAN_PLATFORM_HOST: *out = CCHAN_PLATFORM_HOST; return 0;
    case CCHAN_PLATFORM_CUDA:
        if (ngpus > 0) {
            *out = CCHAN_PLATFORM_CUDA;
            return 0;
        }
#if defined(CCHAN_HAVE_CUDA)
        return cchani_error(CCHAN_ERR_NO_DEVICE, where,
                            "CCHAN_PLATFORM_CUDA requested but no CUDA device is usable");
#else
        return cchani_error(CCHAN_ERR_UNSUPPORTED, where,
                            "CCHAN_PLATFORM_CUDA requested but cchan was built without CUDA");
#endif
    case CCHAN_PLATFORM_HIP:
        return cchani_error(CCHAN_ERR_UNSUPPORTED, where,
                            "the HIP platform is not built into this library");
    }
    return cchani_error(-EINVAL, where, "unknown platform %d", (int)want);
}

static const char *platform_name(uint32_t p) {
    switch (p) {
    case CCHAN_PLATFORM_HOST: return "host";
    case CCHAN_PLATFORM_CUDA: return "cuda";
    case CCHAN_PLATFORM_HIP: return "hip";
    default: return "unknown";
    }
}

/* ---------------------------------------------------------------- local setup */

static int alloc_diag(cchan_comm_t *comm) {
    void *host = NULL, *dev = NULL;
    int r = cchani_host_mapped_alloc(comm, sizeof(cchan_diag_t), &host, &dev);
    if (r) return cchani_error_wrap(r, "cchan_comm_create", "device-failure record");
    comm->diag_host = (cchan_diag_t *)host;
    comm->diag_dev = (cchan_diag_t *)dev;
    return 0;
}

/* Everything a rank decides alone. Failures are reported to the other ranks in the all-gather that
 * follows rather than returned early, so no rank is left waiting for one that gave up. */
static int setup_local(cchan_comm_t *comm, const cchan_comm_config_t *cfg) {
    int ngpus = 0;
    int r = check_config(cfg);
    if (r) return r;
    r = cchani_gpu_device_count(&ngpus);
    if (!r) r = resolve_platform(cfg->platform, ngpus, &comm->platform);
    if (r) return r;
    if (comm->platform == CCHAN_PLATFORM_CUDA) {
        if (cfg->device >= ngpus)
            return cchani_error(CCHAN_ERR_NO_DEVICE, "cchan_comm_create",
                                "device %d requested, %d visible", cfg->device, ngpus);
        comm->device = cfg->device >= 0 ? cfg->device : comm->local_rank % ngpus;
    }
    comm->timeout_ms = cfg->timeout_ms;
    if (cfg->timeout_ms == UINT64_MAX) {
        r = cchani_env_u64("CCHAN_TIMEOUT_MS", 0, &comm->timeout_ms);
        if (r) return r;
    }
    cchani_device_scope_t scope;
    r = cchani_device_enter(comm, &scope);
    if (!r) r = alloc_diag(comm);
    cchani_device_leave(&scope);
    return r;
}

static cchani_peer_info_t local_info(const cchan_comm_t *comm, int status) {
    cchani_peer_info_t me;
    memset(&me, 0, sizeof me);
    me.pid = (int32_t)getpid();
    me.device = comm->device;
    me.platform = (uint32_t)comm->platform;
    me.version = CCHAN_VERSION_CODE;
    int r = host_hash(comm, me.hostname, &me.host_hash);
    _Static_assert(sizeof me.gpu_uuid == CCHANI_GPU_UUID_BYTES, "peer table's UUID size");
    if (!r && !status && comm->device >= 0) {
        r = cchani_gpu_device_uuid(comm->device, me.gpu_uuid);
        if (r) r = cchani_error_wrap(r, "cchan_comm_create", "UUID of GPU %d", comm->device);
    }
    me.status = status ? status : r;
    me.session = cchani_random_u64();
    return me;
}

/* ---------------------------------------------------------------- agreement */

static void version_string(uint32_t code, char out[24]) {
    snprintf(out, 24, "%u.%u.%u", code / 10000, code / 100 % 100, code % 100);
}

/* Every rank runs the same checks over the same all-gathered table, so every rank fails alike. */
static int check_peers(const cchan_comm_t *comm) {
    const char *where = "cchan_comm_create";
    const cchani_peer_info_t *p = comm->peers, *root = &comm->peers[0];
    for (int r = 1; r < comm->nranks; r++) {
        if (p[r].version != root->version) {
            char a[24], b[24];
            version_string(p[r].version, a);
            version_string(root->version, b);
            return cchani_error(CCHAN_ERR_VERSION, where,
                                "rank %d (pid %d on %s) runs cchan %s but rank 0 runs %s", r,
                                p[r].pid, p[r].hostname, a, b);
        }
        if (p[r].platform != root->platform)
            return cchani_error(
                CCHAN_ERR_UNSUPPORTED, where,
                "rank %d (pid %d on %s) uses the %s platform but rank 0 uses %s; all "
                "ranks of a communicator must use one platform",
                r, p[r].pid, p[r].hostname, platform_name(p[r].platform),
                platform_name(root->platform));
    }
    return 0;
}

static int exchange_info(cchan_comm_t *comm, int status) {
    cchani_peer_info_t me = local_info(comm, status);
    comm->peers = (cchani_peer_info_t *)calloc((size_t)comm->nranks, sizeof *comm->peers);
    if (!comm->peers)
        return cchani_error(-ENOMEM, "cchan_comm_create", "peer table of %d ranks", comm->nranks);
    int r = cchan_bootstrap_allgather(comm->bs, &me, comm->peers, sizeof me);
    if (r) return cchani_error_wrap(r, "cchan_comm_create", "all-gather of peer information");
    comm->session = comm->peers[0].session;
    r = cchani_comm_verdict(comm, status, comm->peers, sizeof *comm->peers,
                            offsetof(cchani_peer_info_t, status), "cchan_comm_create",
                            "set up its communicator");
    return r ? r : check_peers(comm);
}

/* Reason text one rank sends the others when it failed a step: enough for the call, the argument
 * and the expected value. */
#define AGREE_REASON_BYTES 320

static int verdict(cchan_comm_t *comm, int mine, const char *own_reason, const void *table,
                   size_t stride, size_t status_offset, const char *where, const char *step) {
    const uint8_t *t = (const uint8_t *)table;
    int first = -1, first_status = 0, any = 0;
    for (int p = 0; p < comm->nranks; p++) {
        int32_t s;
        memcpy(&s, t + (size_t)p * stride + status_offset, sizeof s);
        any |= s != 0;
        if (s && first < 0 && p != comm->rank) {
            first = p;
            first_status = s;
        }
    }
    if (!any) return mine;
    /* Every rank saw the same table, so every rank takes part in this second round or none does. */
    char own[AGREE_REASON_BYTES];
    memset(own, 0, sizeof own);
    if (mine) snprintf(own, sizeof own, "%s", own_reason ? own_reason : cchan_last_error());
    char *all = (char *)calloc((size_t)comm->nranks, sizeof own);
    if (!all)
        return mine ? mine : cchani_error(-ENOMEM, where, "reasons of %d ranks", comm->nranks);
    int r = cchan_bootstrap_allgather(comm->bs, own, all, sizeof own);
    if (mine) {
        /* The rank's own error stands: its message already says why. */
        free(all);
        return mine;
    }
    if (r) {
        free(all);
        return cchani_error(CCHAN_ERR_PEER, where,
                            "rank %d failed%s%s (%s); its reason did not arrive", first,
                            step ? " to " : "", step ? step : "", cchan_strerror(first_status));
    }
    char why[AGREE_REASON_BYTES];
    const char *raw = all + (size_t)first * sizeof own;
    cchani_boot_sanitize(why, sizeof why, (const uint8_t *)raw, strnlen(raw, sizeof own - 1));
    r = cchani_error(CCHAN_ERR_PEER, where, "rank %d failed%s%s: %s", first, step ? " to " : "",
                     step ? step : "", why[0] ? why : cchan_strerror(first_status));
    free(all);
    return r;
}

int cchani_comm_verdict(cchan_comm_t *comm, int mine, const void *table, size_t stride,
                        size_t status_offset, const char *where, const char *step) {
    return verdict(comm, mine, NULL, table, stride, status_offset, where, step);
}

static int agree(cchan_comm_t *comm, int status, const char *reason, const char *what) {
    int32_t mine = status;
    int32_t *all = (int32_t *)calloc((size_t)comm->nranks, sizeof *all);
    if (!all) return cchani_error(-ENOMEM, what, "agreement of %d ranks", comm->nranks);
    int r = cchan_bootstrap_allgather(comm->bs, &mine, all, sizeof mine);
    if (r)
        r = cchani_error_wrap(r, what, "all-gather of the ranks' status");
    else
        r = verdict(comm, status, reason, all, sizeof *all, 0, what, NULL);
    free(all);
    return r;
}

int cchani_comm_agree(cchan_comm_t *comm, int status, const char *what) {
    return agree(comm, status, NULL, what);
}

int cchan_comm_agree(cchan_comm_t *comm, int status, const char *what, const char *reason) {
    CCHANI_CHECK_ARG(comm != NULL, "cchan_comm_agree");
    int a = cchani_comm_check_abort(comm, what ? what : "cchan_comm_agree");
    if (a) return a;
    if (!what) what = "cchan_comm_agree";
    if (status > 0) status = -EINVAL;
    return agree(comm, status, reason, what);
}

/* ---------------------------------------------------------------- abort */

#define WATCH_PERIOD_NS 100000000ull /* a dead peer ends every wait within a few of these */

static void set_async_error(cchan_comm_t *comm, int status, int rank, const char *why) {
    if (__atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&comm->async_lock);
    snprintf(comm->async_why, sizeof comm->async_why, "%s", why);
    pthread_mutex_unlock(&comm->async_lock);
    int code = status;
    __atomic_store_n(&comm->async_error, code, __ATOMIC_RELEASE);
    /* The device view is host-mapped: rank first, then the word the wait loops poll. */
    __atomic_store_n(&comm->diag_host->abort_rank, rank, __ATOMIC_RELAXED);
    __atomic_store_n(&comm->diag_host->abort, code, __ATOMIC_RELEASE);
    CCHANI_WARN(CCHANI_SUB_INIT, "rank %d: communicator aborted: %s", comm->rank, why);
}

static void *watch(void *arg) {
    cchan_comm_t *comm = (cchan_comm_t *)arg;
    while (!__atomic_load_n(&comm->watch_stop, __ATOMIC_ACQUIRE)) {
        int want = __atomic_load_n(&comm->abort_request, __ATOMIC_ACQUIRE);
        int rank = -1;
        char why[1024];
        int status = cchani_boot_watch(comm->bs, want ? CCHAN_ERR_ABORTED : 0,
                                       "cchan_comm_abort() was called", &rank, why, sizeof why);
        /* A rank that died is named; any other lasting bootstrap failure aborts too. */
        if (status < 0 && status != -EAGAIN) {
            int died = (status == CCHAN_ERR_PEER_DEAD || status == CCHAN_ERR_PEER) && rank >= 0 &&
                       rank != comm->rank;
            set_async_error(comm, died ? CCHAN_ERR_PEER_DEAD : CCHAN_ERR_ABORTED, rank, why);
        }
        struct timespec ts = {0, (long)WATCH_PERIOD_NS};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int start_watcher(cchan_comm_t *comm) {
    int e = pthread_create(&comm->watcher, NULL, watch, comm);
    if (e) return cchani_error(-e, "cchan_comm_create", "cannot start the watcher thread");
    comm->watching = 1;
    return 0;
}

static void stop_watcher(cchan_comm_t *comm) {
    if (!comm->watching) return;
    __atomic_store_n(&comm->watch_stop, 1, __ATOMIC_RELEASE);
    pthread_join(comm->watcher, NULL);
    comm->watching = 0;
}

/* Sends this rank's abort to the others now if no thread is inside the bootstrap; else the
 * watcher (or cchan_comm_destroy) does. */
static void tell_abort(cchan_comm_t *comm) {
    int rank;
    char why[1024];
    (void)cchani_boot_watch(comm->bs, CCHAN_ERR_ABORTED, "cchan_comm_abort() was called", &rank,
                            why, sizeof why);
}

int cchan_comm_abort(cchan_comm_t *comm) {
    CCHANI_CHECK_ARG(comm != NULL, "cchan_comm_abort");
    char why[96];
    snprintf(why, sizeof why, "rank %d aborted the communicator (cchan_comm_abort)", comm->rank);
    set_async_error(comm, CCHAN_ERR_ABORTED, comm->rank, why);
    __atomic_store_n(&comm->abort_request, 1, __ATOMIC_RELEASE);
    tell_abort(comm);
    return 0;
}

/* The abort's cause as this rank saw it, for every call that fails on it. */
static int abort_error(cchan_comm_t *comm, int status, const char *where) {
    char cause[48] = "";
    int who = __atomic_load_n(&comm->diag_host->abort_rank, __ATOMIC_RELAXED);
    if (status == CCHAN_ERR_PEER_DEAD && who >= 0 && who != comm->rank)
        snprintf(cause, sizeof cause, "peer %d died: ", who);
    pthread_mutex_lock(&comm->async_lock);
    int r = cchani_error(status, where, "rank %d: the communicator was aborted: %s%s", comm->rank,
                         cause, comm->async_why);
    pthread_mutex_unlock(&comm->async_lock);
    return r;
}

int cchani_comm_check_abort(cchan_comm_t *comm, const char *where) {
    int s = __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE);
    return CCHAN_LIKELY(s == 0) ? 0 : abort_error(comm, s, where);
}

int cchan_comm_check(cchan_comm_t *comm, const char *where) {
    if (!where) where = "cchan_comm_check";
    if (!comm) return cchani_error(-EINVAL, where, "comm is NULL");
    return cchani_comm_check_abort(comm, where);
}

int cchan_comm_get_async_error(cchan_comm_t *comm, int *status) {
    CCHANI_CHECK_ARG(comm != NULL && status != NULL, "cchan_comm_get_async_error");
    int s = __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE);
    if (s) (void)abort_error(comm, s, "cchan_comm_get_async_error");
    *status = s;
    return 0;
}

/* ---------------------------------------------------------------- create / destroy */

static void comm_free(cchan_comm_t *comm) {
    stop_watcher(comm);
    if (comm->diag_host) {
        cchani_device_scope_t scope;
        if (cchani_device_enter(comm, &scope) == 0) {
            (void)cchani_host_mapped_free(comm, comm->diag_host);
            cchani_device_leave(&scope);
        }
    }
    free(comm->peers);
    pthread_mutex_destroy(&comm->async_lock);
    free(comm);
}

int cchan_comm_create(cchan_bootstrap_t *bs, const cchan_comm_config_t *cfg, cchan_comm_t **out) {
    static const cchan_comm_config_t defaults = CCHAN_COMM_CONFIG_INIT;
    CCHANI_CHECK_ARG(bs != NULL, "cchan_comm_create");
    CCHANI_CHECK_ARG(out != NULL, "cchan_comm_create");
    if (!cfg) cfg = &defaults;
    int r;
    cchan_comm_t *comm = (cchan_comm_t *)calloc(1, sizeof *comm);
    if (!comm) return cchani_error(-ENOMEM, "cchan_comm_create", "communicator");
    comm->bs = bs;
    comm->rank = cchan_bootstrap_rank(bs);
    comm->nranks = cchan_bootstrap_size(bs);
    comm->local_rank = cchan_bootstrap_local_rank(bs);
    comm->platform = CCHAN_PLATFORM_HOST;
    comm->device = -1;
    pthread_mutex_init(&comm->async_lock, NULL);
    if (comm->rank < 0 || comm->nranks < 1 || comm->rank >= comm->nranks) {
        r = cchani_error(-EINVAL, "cchan_comm_create", "bootstrap reports rank %d of %d",
                         comm->rank, comm->nranks);
        free(comm);
        return r;
    }
    if (comm->local_rank < 0) comm->local_rank = comm->rank;
    r = exchange_info(comm, setup_local(comm, cfg));
    if (!r) r = start_watcher(comm);
    if (r) {
        comm_free(comm);
        return r;
    }
    cchani_report_optional_libs();
    CCHANI_INFO(CCHANI_SUB_INIT,
                "comm rank %d/%d platform %s device %d timeout %llu ms session %016llx", comm->rank,
                comm->nranks, platform_name(comm->platform), comm->device,
                (unsigned long long)comm->timeout_ms, (unsigned long long)comm->session);
    *out = comm;
    return 0;
}

int cchan_comm_destroy(cchan_comm_t *comm) {
    if (!comm) return 0;
    uint32_t live = __atomic_load_n(&comm->live_objects, __ATOMIC_ACQUIRE);
    if (live)
        return cchani_error(-EBUSY, "cchan_comm_destroy",
                            "%u registrations, semaphore sets or barriers of this communicator are "
                            "still alive; destroy them first",
                            live);
    stop_watcher(comm);
    if (__atomic_load_n(&comm->abort_request, __ATOMIC_ACQUIRE)) tell_abort(comm);
    int r = cchan_bootstrap_destroy(comm->bs);
    comm_free(comm);
    return r;
}

void cchani_comm_hold(cchan_comm_t *comm) {
    __atomic_fetch_add(&comm->live_objects, 1, __ATOMIC_RELAXED);
}
void cchani_comm_release(cchan_comm_t *comm) {
    __atomic_fetch_sub(&comm->live_objects, 1, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- accessors */

/* A getter's return value cannot carry the reason, so a NULL handle leaves it in the last error. */
static int no_comm(const char *where) { return cchani_error(-EINVAL, where, "comm is NULL"); }

int cchan_comm_rank(const cchan_comm_t *comm) {
    return comm ? comm->rank : no_comm("cchan_comm_rank");
}
int cchan_comm_size(const cchan_comm_t *comm) {
    return comm ? comm->nranks : no_comm("cchan_comm_size");
}
cchan_platform_t cchan_comm_platform(const cchan_comm_t *comm) {
    if (comm) return comm->platform;
    no_comm("cchan_comm_platform");
    return CCHAN_PLATFORM_AUTO;
}
int cchan_comm_device(const cchan_comm_t *comm) {
    return comm ? comm->device : no_comm("cchan_comm_device");
}
cchan_bootstrap_t *cchan_comm_bootstrap(cchan_comm_t *comm) {
    if (comm) return comm->bs;
    no_comm("cchan_comm_bootstrap");
    return NULL;
}

uint32_t cchani_comm_next_id(cchan_comm_t *comm) { return cchani_comm_reserve_ids(comm, 1); }

int cchani_comm_same_gpu(const cchan_comm_t *comm, int rank) {
    if (comm->device < 0 || rank < 0 || rank >= comm->nranks) return 0;
    if (rank == comm->rank) return 1;
    const cchani_peer_info_t *me = &comm->peers[comm->rank], *p = &comm->peers[rank];
    static const uint8_t none[CCHANI_GPU_UUID_BYTES];
    if (p->device < 0 || memcmp(p->gpu_uuid, none, sizeof none) == 0) return 0;
    return memcmp(me->gpu_uuid, p->gpu_uuid, sizeof me->gpu_uuid) == 0;
}

uint32_t cchani_comm_reserve_ids(cchan_comm_t *comm, uint32_t n) {
    return __atomic_fetch_add(&comm->next_object_id, n, __ATOMIC_RELAXED);
}

int cchan_comm_set_timeout_ms(cchan_comm_t *comm, uint64_t timeout_ms) {
    if (!comm) return no_comm("cchan_comm_set_timeout_ms");
    comm->timeout_ms = timeout_ms;
    return 0;
}

cchan_wait_ctl_t cchan_comm_wait_ctl(const cchan_comm_t *comm, int peer, uint32_t id) {
    cchan_wait_ctl_t ctl;
    memset(&ctl, 0, sizeof ctl);
    if (!comm) {
        no_comm("cchan_comm_wait_ctl");
        return ctl;
    }
    const uint64_t max_ms = UINT64_MAX / 1000000u;
    ctl.diag = comm->diag_dev;
    ctl.timeout_ns = comm->timeout_ms > max_ms ? UINT64_MAX : comm->timeout_ms * 1000000u;
    ctl.rank = comm->rank;
    ctl.peer = peer;
    ctl.id = id;
    return ctl;
}

/* ---------------------------------------------------------------- device failures */

static int report_wait(const cchan_diag_t *g) {
    const char *where = "cchan_comm_check_device";
    double s = (double)g->waited_ns / 1e9;
    unsigned long long exp = (unsigned long long)g->expected, obs = (unsigned long long)g->observed;
    switch (g->kind) {
    case CCHAN_WAIT_SEMAPHORE:
        return cchani_error(CCHAN_ERR_DEVICE_TIMEOUT, where,
                            "rank %d timed out after %.1f s waiting for semaphore %u from peer %d: "
                            "expected %llu, observed %llu",
                            g->rank, s, g->id, g->peer, exp, obs);
    case CCHAN_WAIT_PACKET:
        /* peer -1: a packet area any rank may write (collective and plan kernels); its id is
         * the kernel's wait id, not a channel's semaphore */
        if (g->peer < 0)
            return cchani_error(CCHAN_ERR_DEVICE_TIMEOUT, where,
                                "rank %d timed out after %.1f s waiting for LL packets in a shared "
                                "packet area (writer not recorded: any peer; wait id 0x%x): "
                                "expected flag %llu, observed flag %llu",
                                g->rank, s, g->id, exp, obs);
        return cchani_error(CCHAN_ERR_DEVICE_TIMEOUT, where,
                            "rank %d timed out after %.1f s waiting for LL packets from peer %d "
                            "(channel semaphore %u): expected flag %llu, observed flag %llu",
                            g->rank, s, g->peer, g->id, exp, obs);
    case CCHAN_WAIT_FIFO_FULL:
        return cchani_error(CCHAN_ERR_DEVICE_TIMEOUT, where,
                            "rank %d timed out after %.1f s waiting for a free proxy FIFO slot "
                            "(channel %u, peer %d): request %llu, proxy tail %llu",
                            g->rank, s, g->id, g->peer, exp, obs);
    case CCHAN_WAIT_FLUSH:
        return cchani_error(
            CCHAN_ERR_DEVICE_TIMEOUT, where,
            "rank %d timed out after %.1f s waiting for a flush of port channel %u to "
            "peer %d: expected %llu, completed %llu",
            g->rank, s, g->id, g->peer, exp, obs);
    case CCHAN_WAIT_BARRIER:
        return cchani_error(CCHAN_ERR_DEVICE_TIMEOUT, where,
                            "rank %d timed out after %.1f s waiting at barrier %u: expected %llu "
                            "arrivals, observed %llu",
                            g->rank, s, g->id, exp, obs);
    case CCHAN_FAIL_RANGE:
        return cchani_error(CCHAN_ERR_RANGE, where,
                            "rank %d: request on channel %u to peer %d is out of range: end offset "
                            "%llu exceeds the limit %llu",
                            g->rank, g->id, g->peer, obs, exp);
    case CCHAN_FAIL_DROPPED:
        return cchani_error(g->status < 0 ? g->status : CCHAN_ERR_INTERNAL, where,
                            "rank %d: flush %llu of port channel %u to peer %d: the proxy dropped "
                            "%llu request(s) of this channel since the previous flush (nothing "
                            "moved or signalled for them; cchan_proxy_get_error names the first)",
                            g->rank, exp, g->id, g->peer, obs);
    default:
        return cchani_error(CCHAN_ERR_INTERNAL, where,
                            "rank %d: device failure record of unknown kind %u", g->rank, g->kind);
    }
}

static const char *wait_name(uint32_t kind, char *buf, size_t n, const cchan_diag_t *g) {
    switch (kind) {
    case CCHAN_WAIT_SEMAPHORE: snprintf(buf, n, "semaphore %u from peer %d", g->id, g->peer); break;
    case CCHAN_WAIT_PACKET:
        if (g->peer < 0) /* a shared packet area: no single writer was recorded */
            snprintf(buf, n, "LL packets in a shared packet area (writer not recorded: any peer)");
        else
            snprintf(buf, n, "LL packets from peer %d", g->peer);
        break;
    case CCHAN_WAIT_FIFO_FULL:
        snprintf(buf, n, "a free proxy FIFO slot (channel %u)", g->id);
        break;
    case CCHAN_WAIT_FLUSH: snprintf(buf, n, "a flush of port channel %u", g->id); break;
    case CCHAN_WAIT_BARRIER: snprintf(buf, n, "barrier %u", g->id); break;
    default: snprintf(buf, n, "wait kind %u", kind); break;
    }
    return buf;
}

static int report_abort(cchan_comm_t *comm, const cchan_diag_t *g) {
    int status = __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE);
    if (!status) status = CCHAN_ERR_ABORTED;
    char what[96], cause[64] = "";
    int dead = __atomic_load_n(&g->abort_rank, __ATOMIC_RELAXED);
    if (status == CCHAN_ERR_PEER_DEAD && dead >= 0)
        snprintf(cause, sizeof cause, "peer %d died: ", dead);
    pthread_mutex_lock(&comm->async_lock);
    int r =
        cchani_error(status, "cchan_comm_check_device",
                     "rank %d stopped waiting for %s (expected %llu, observed %llu): %s%s", g->rank,
                     wait_name(g->kind, what, sizeof what, g), (unsigned long long)g->expected,
                     (unsigned long long)g->observed, cause, comm->async_why);
    pthread_mutex_unlock(&comm->async_lock);
    return r;
}

int cchan_comm_check_device(cchan_comm_t *comm) {
    CCHANI_CHECK_ARG(comm != NULL, "cchan_comm_check_device");
    const cchan_diag_t *g = comm->diag_host;
    /* An abort that no wait saw (every wait of the last kernel was satisfied at once) still fails
     * the check: the kernel's results may be a mix of before and after it. */
    if (cchan_load_acquire_sys_u32(&g->state) != CCHAN_DIAG_COMPLETE)
        return cchani_comm_check_abort(comm, "cchan_comm_check_device");
    if (g->aborted) return report_abort(comm, g);
    return report_wait(g);
}
