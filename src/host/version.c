/* cchan version and build description. */
#include "internal.h"

#define CCHANI_STR2(x) #x
#define CCHANI_STR(x) CCHANI_STR2(x)

#if defined(CCHAN_HAVE_CUDA)
#define CCHANI_BUILD_CUDA "cuda"
#else
#define CCHANI_BUILD_CUDA "no cuda"
#endif
#if defined(CCHAN_HAVE_NUMA)
#define CCHANI_BUILD_NUMA "numa"
#else
#define CCHANI_BUILD_NUMA "no numa"
#endif
#if defined(CCHAN_ENABLE_IBVERBS)
#define CCHANI_BUILD_IB "ibverbs: dlopen"
#else
#define CCHANI_BUILD_IB "no ibverbs"
#endif

const char *cchan_version(void) {
    return CCHANI_STR(CCHAN_VERSION_MAJOR) "." CCHANI_STR(CCHAN_VERSION_MINOR) "." CCHANI_STR(
        CCHAN_VERSION_PATCH) " (" CCHANI_BUILD_CUDA ", " CCHANI_BUILD_NUMA ", " CCHANI_BUILD_IB ")";
}

int cchan_version_code(void) { return CCHAN_VERSION_CODE; }
