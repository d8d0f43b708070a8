/* Status codes: every code has its own description, errno values read as errno, and a failing call
 * leaves a last-error message that names the call. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "cchan/cchan.h"
#include "cchan/last_error.h"

static const int codes[] = {
    CCHAN_OK,
    CCHAN_ERR_INTERNAL,
    CCHAN_ERR_TIMEOUT,
    CCHAN_ERR_PEER,
    CCHAN_ERR_VERSION,
    CCHAN_ERR_PROTOCOL,
    CCHAN_ERR_CUDA,
    CCHAN_ERR_UNSUPPORTED,
    CCHAN_ERR_NO_DEVICE,
    CCHAN_ERR_DEVICE_TIMEOUT,
    CCHAN_ERR_IN_PROGRESS,
    CCHAN_ERR_NO_RESOURCE,
    CCHAN_ERR_RANGE,
    CCHAN_ERR_SYSTEM,
};

static void test_every_code_has_its_own_string(void **state) {
    (void)state;
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        const char *s = cchan_strerror(codes[i]);
        assert_non_null(s);
        assert_string_not_equal(s, "unknown status");
        for (size_t j = 0; j < i; j++) assert_string_not_equal(s, cchan_strerror(codes[j]));
    }
    assert_string_equal(cchan_strerror(CCHAN_ERR_DEVICE_TIMEOUT), "a device-side wait timed out");
}

static void test_errno_codes(void **state) {
    (void)state;
    assert_non_null(strstr(cchan_strerror(-EINVAL), "nvalid"));
    assert_non_null(strstr(cchan_strerror(-ENOMEM), "memory"));
    assert_string_equal(cchan_strerror(-9999), "unknown status");
    assert_string_equal(cchan_strerror(12345), "unknown status");
}

static void test_last_error_names_the_call(void **state) {
    (void)state;
    cchan_comm_t *comm = NULL;
    assert_int_equal(cchan_comm_create(NULL, NULL, &comm), -EINVAL);
    assert_null(comm);
    assert_non_null(strstr(cchan_last_error(), "cchan_comm_create"));
    assert_int_equal(cchan_mem_alloc(NULL, 16, 0, NULL), -EINVAL);
    assert_non_null(strstr(cchan_last_error(), "cchan_mem_alloc"));
    assert_int_equal(cchan_sem_set_create(NULL, 1, 0, NULL), -EINVAL);
    assert_non_null(strstr(cchan_last_error(), "cchan_sem_set_create"));
    assert_int_equal(cchan_comm_check_device(NULL), -EINVAL);
    assert_int_equal(cchan_mem_destroy(NULL), 0);
    assert_int_equal(cchan_sem_set_destroy(NULL), 0);
    assert_int_equal(cchan_comm_destroy(NULL), 0);
}

/* The libraries' setter: the same message cchan_last_error() returns, an argument may be that
 * message itself, and a message too long for the buffer ends in "..." rather than silently. */
static void test_library_last_error(void **state) {
    (void)state;
    assert_int_equal(cchan_comm_create(NULL, NULL, NULL), -EINVAL);
    assert_int_equal(cchan_set_last_error(-ENOMEM, "mylib_create: scratch: %s", cchan_last_error()),
                     -ENOMEM);
    assert_non_null(strstr(cchan_last_error(), "mylib_create: scratch: cchan_comm_create"));
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(cchan_set_last_error(-EINVAL, "lib: %s", big), -EINVAL);
    size_t n = strlen(cchan_last_error());
    assert_true(n > 900 && n < sizeof big);
    assert_string_equal(cchan_last_error() + n - 3, "...");
    cchan_clear_last_error();
    assert_string_equal(cchan_last_error(), "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_has_its_own_string),
        cmocka_unit_test(test_errno_codes),
        cmocka_unit_test(test_last_error_names_the_call),
        cmocka_unit_test(test_library_last_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
