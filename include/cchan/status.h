/* cchan status codes, shared by host and device code.
 *
 * Every host call returns int: 0 on success, a negative value on failure. Failures are either a
 * negated errno value (-EINVAL for a bad argument, -ENOMEM, -ETIMEDOUT, -ECONNREFUSED, ...) or one of
 * the cchan codes below, which start at 256 so they never collide with errno. cchan_strerror() names
 * any of them; cchan_last_error() gives the calling thread's last failure with its context.
 */
#ifndef CCHAN_STATUS_H
#define CCHAN_STATUS_H

#define CCHAN_OK 0

enum cchan_error {
    CCHAN_ERR_INTERNAL = -256,       /* a cchan invariant broke: a bug, please report */
    CCHAN_ERR_TIMEOUT = -257,        /* a deadline passed (bootstrap, proxy drain, device wait) */
    CCHAN_ERR_PEER = -258,           /* a peer failed (its error named), closed or died */
    CCHAN_ERR_VERSION = -259,        /* a peer or descriptor speaks another cchan version */
    CCHAN_ERR_PROTOCOL = -260,       /* a malformed, foreign, truncated or oversized message */
    CCHAN_ERR_CUDA = -261,           /* the CUDA or HIP runtime/driver reported an error */
    CCHAN_ERR_UNSUPPORTED = -262,    /* not available on this backend, build or machine */
    CCHAN_ERR_NO_DEVICE = -263,      /* no GPU (or RDMA device) where one is needed */
    CCHAN_ERR_DEVICE_TIMEOUT = -264, /* a device-side wait hit its deadline; see the diagnostic */
    CCHAN_ERR_IN_PROGRESS = -265,    /* the operation has not completed yet (non-blocking calls) */
    CCHAN_ERR_NO_RESOURCE = -266,    /* a bounded resource is exhausted (queue full, too many ...) */
    CCHAN_ERR_RANGE = -267,          /* a size or offset is out of bounds or not representable */
    CCHAN_ERR_SYSTEM = -268,         /* a system library failed in a way errno does not describe */
    CCHAN_ERR_PEER_DEAD = -269,      /* the communicator was aborted because a peer rank died */
    CCHAN_ERR_ABORTED = -270         /* the communicator was aborted (cchan_comm_abort, any rank) */
};

#endif /* CCHAN_STATUS_H */
