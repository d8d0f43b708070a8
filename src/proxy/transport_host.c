/* cchan host transport: port channels between processes (or threads) of one host on the host
 * backend. Both buffers are shared-memory mappings, so a put is a memcpy done by the proxy thread
 * itself; it has completed when put() returns, which makes signal and flush immediate. */
#include <string.h>

#include "transport.h"

static int host_open(cchani_port_channel_t *ch) {
    ch->transport = NULL;
    return 0;
}

static int host_put(cchani_port_channel_t *ch, uint64_t dst_off, uint64_t src_off, uint64_t bytes) {
    memcpy(ch->dst + dst_off, ch->src + src_off, bytes);
    if (ch->timing) cchani_port_stage(ch, CCHANI_STAGE_PUT_ISSUE, ch->seen_ns, cchani_now_ns());
    return 0;
}

/* The copies above are plain stores of this thread: the release store orders them before it. */
static int host_signal(cchani_port_channel_t *ch, uint64_t outbound) {
    cchani_port_deliver_signal(ch, outbound);
    ch->counters.signals_direct++;
    if (ch->timing) cchani_port_stage(ch, CCHANI_STAGE_SIGNAL_DIRECT, ch->seen_ns, cchani_now_ns());
    return 0;
}

static int host_flush(cchani_port_channel_t *ch, uint64_t count) {
    cchani_port_complete_flush(ch, count);
    if (ch->timing) cchani_port_stage(ch, CCHANI_STAGE_FLUSH, ch->seen_ns, cchani_now_ns());
    return 0;
}

static void host_close(cchani_port_channel_t *ch) { (void)ch; }

const cchani_transport_ops_t cchani_transport_host = {
    .size = sizeof(cchani_transport_ops_t),
    .name = "host",
    .open = host_open,
    .put = host_put,
    .signal = host_signal,
    .flush = host_flush,
    .progress = NULL,
    .close = host_close,
};
