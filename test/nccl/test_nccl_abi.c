/* libcchan_nccl's ABI against the toolkit's nccl.h.
 *
 * Signatures: the shim's sources are also compiled against nccl.h (target cchan_nccl_sigcheck,
 * -DCCHAN_NCCL_SYSTEM_HEADER -Werror), where a definition that differs from nccl.h's declaration is
 * a compile error, and the device API's host functions against NCCL's C++ device headers
 * (device_api_check.cpp); this program is built after both. Here: every enum value, size and
 * ncclConfig_t offset of the shim's header equals nccl.h's, and every function resolves in the
 * built library (argv[1]) under both its nccl and pnccl names, as distinct from nothing, and
 * callable.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "nccl_abi.h"
#include "nccl_abi_facts.h"

extern const long long cchan_nccl_facts_sys[], cchan_nccl_facts_own[];
static const char *fact_names[] = {CCHAN_NCCL_ABI_FACTS(CCHAN_NCCL_FACT_NAME)};

#define NAME(ret, name, params, args) #name,
static const char *functions[] = {CCHAN_NCCL_FUNCS(NAME)
                                      CCHAN_NCCL_DEVICE_FUNCS(NAME) "ncclResetDebugInit"};

int main(int argc, char **argv) {
    int bad = 0;
    size_t nfacts = sizeof fact_names / sizeof fact_names[0];
    for (size_t i = 0; i < nfacts; i++) {
        if (cchan_nccl_facts_sys[i] == cchan_nccl_facts_own[i]) continue;
        if (!strcmp(fact_names[i], "NCCL_VERSION_CODE")) {
            printf("note: toolkit nccl.h is version %lld, the shim implements %lld\n",
                   cchan_nccl_facts_sys[i], cchan_nccl_facts_own[i]);
            continue;
        }
        printf("MISMATCH %s: nccl.h %lld, shim %lld\n", fact_names[i], cchan_nccl_facts_sys[i],
               cchan_nccl_facts_own[i]);
        bad++;
    }
    printf("%zu facts compared, %d mismatches\n", nfacts, bad);
    if (argc < 2) return bad ? 1 : 0;

    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAIL dlopen(%s): %s\n", argv[1], dlerror());
        return 1;
    }
    size_t nfun = sizeof functions / sizeof functions[0];
    for (size_t i = 0; i < nfun; i++) {
        char pname[96];
        snprintf(pname, sizeof pname, "p%s", functions[i]);
        void *f = dlsym(h, functions[i]), *pf = dlsym(h, pname);
        if (!f || !pf || f != pf) {
            printf("FAIL %s: %p, %s: %p (want both, the same function)\n", functions[i], f, pname,
                   pf);
            bad++;
        }
    }
    printf("%zu functions resolved under both names\n", nfun);
    const char *(*errstr)(ncclResult_t);
    ncclResult_t (*version)(int *);
    *(void **)&errstr = dlsym(h, "ncclGetErrorString");
    *(void **)&version = dlsym(h, "ncclGetVersion");
    int v = 0;
    if (!errstr || !errstr(ncclInvalidUsage)[0] || !version || version(&v) != ncclSuccess ||
        v <= 0) {
        printf("FAIL calling ncclGetErrorString / ncclGetVersion\n");
        bad++;
    }
    return bad ? 1 : 0;
}
