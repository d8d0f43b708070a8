/* cchan_optional_lib_available: agrees with a direct dlopen of each library, rejects other names. */
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "cchan/cchan.h"

static int loads(const char *soname) {
    void *h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
    if (h) dlclose(h);
    return h != NULL;
}

static void test_matches_dlopen(void **state) {
    (void)state;
    assert_int_equal(cchan_optional_lib_available("ibverbs"), loads("libibverbs.so.1"));
    assert_int_equal(cchan_optional_lib_available("nvml"), loads("libnvidia-ml.so.1"));
}

static void test_unknown_name(void **state) {
    (void)state;
    assert_int_equal(cchan_optional_lib_available("libfoo"), -EINVAL);
    assert_non_null(strstr(cchan_last_error(), "libfoo"));
    assert_int_equal(cchan_optional_lib_available(NULL), -EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_dlopen),
        cmocka_unit_test(test_unknown_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
