/* The environment registry's getters: defaults when unset or empty, strict parsing, ranges, and a
 * malformed value failing with a message naming the variable, the value and the accepted form. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cchan/env.h"

/* The call failed with -EINVAL and a message holding every string of `want`. */
static void assert_env_error(int rc, const char *const *want) {
    assert_int_equal(rc, -EINVAL);
    for (; *want; want++)
        if (!strstr(cchan_last_error(), *want))
            fail_msg("last error '%s' lacks '%s'", cchan_last_error(), *want);
}

static void test_registry(void **state) {
    (void)state;
    assert_true(cchan_env_count() > 0);
    assert_null(cchan_env_at(-1));
    assert_null(cchan_env_at(cchan_env_count()));
    for (int i = 0; i < cchan_env_count(); i++) {
        const cchan_env_var_t *e = cchan_env_at(i);
        assert_non_null(e);
        assert_memory_equal(e->name, "CCHAN_", 6);
        assert_ptr_equal(cchan_env_lookup(e->name), e); /* one entry a name */
        assert_non_null(e->doc);
        assert_non_null(e->reader);
        assert_non_null(e->dflt_doc);
        if (e->type == CCHAN_ENV_INT) assert_true(e->min <= e->max);
    }
    assert_null(cchan_env_lookup("CCHAN_NO_SUCH_VARIABLE"));
    assert_null(cchan_env_lookup(NULL));
}

static void test_int(void **state) {
    (void)state;
    int64_t v = 7;
    unsetenv("CCHAN_COLL_CE_REGIONS");
    assert_int_equal(cchan_env_get_int("CCHAN_COLL_CE_REGIONS", &v), 0);
    assert_int_equal(v, 3);
    setenv("CCHAN_COLL_CE_REGIONS", "", 1); /* empty = unset */
    assert_int_equal(cchan_env_get_int("CCHAN_COLL_CE_REGIONS", &v), 0);
    assert_int_equal(v, 3);
    setenv("CCHAN_COLL_CE_REGIONS", "0x8", 1);
    assert_int_equal(cchan_env_get_int("CCHAN_COLL_CE_REGIONS", &v), 0);
    assert_int_equal(v, 8);
    static const char *const bad[] = {"9", "1", "4x", "x", " 4", "99999999999999999999", NULL};
    for (int i = 0; bad[i]; i++) {
        setenv("CCHAN_COLL_CE_REGIONS", bad[i], 1);
        v = 5;
        const char *want[] = {"CCHAN_COLL_CE_REGIONS", bad[i], "integer in 2..8", NULL};
        assert_env_error(cchan_env_get_int("CCHAN_COLL_CE_REGIONS", &v), want);
        assert_int_equal(v, 5); /* untouched on failure */
    }
    unsetenv("CCHAN_COLL_CE_REGIONS");
}

static void test_bool(void **state) {
    (void)state;
    static const struct {
        const char *text;
        int value;
    } good[] = {{"0", 0}, {"1", 1}, {"true", 1}, {"FALSE", 0}, {"on", 1}, {"Off", 0}};
    int v = -1;
    unsetenv("CCHAN_EXEC_PDL");
    assert_int_equal(cchan_env_get_bool("CCHAN_EXEC_PDL", &v), 0);
    assert_int_equal(v, 1); /* default on */
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("CCHAN_EXEC_PDL", good[i].text, 1);
        assert_int_equal(cchan_env_get_bool("CCHAN_EXEC_PDL", &v), 0);
        assert_int_equal(v, good[i].value);
    }
    /* Before the registry, anything but a leading '0' turned it on: "00" and "no" too. */
    static const char *const bad[] = {"2", "yes please", "00", "01", "truex", NULL};
    for (int i = 0; bad[i]; i++) {
        setenv("CCHAN_EXEC_PDL", bad[i], 1);
        const char *want[] = {"CCHAN_EXEC_PDL", bad[i], "0, 1, true, false, on or off", NULL};
        assert_env_error(cchan_env_get_bool("CCHAN_EXEC_PDL", &v), want);
    }
    unsetenv("CCHAN_EXEC_PDL");
}

static void test_str(void **state) {
    (void)state;
    const char *v = "x";
    unsetenv("CCHAN_FDPASS");
    assert_int_equal(cchan_env_get_str("CCHAN_FDPASS", &v), 0);
    assert_null(v);
    setenv("CCHAN_FDPASS", "PIDFD", 1);
    assert_int_equal(cchan_env_get_str("CCHAN_FDPASS", &v), 0);
    assert_string_equal(v, "PIDFD");
    setenv("CCHAN_FDPASS", "pid", 1);
    const char *want[] = {"CCHAN_FDPASS", "'pid'", "auto|pidfd|scm_rights", NULL};
    assert_env_error(cchan_env_get_str("CCHAN_FDPASS", &v), want);
    unsetenv("CCHAN_FDPASS");
    setenv("CCHAN_MOE_VARIANT", "ht_senders=4", 1); /* free text: the reader parses it */
    assert_int_equal(cchan_env_get_str("CCHAN_MOE_VARIANT", &v), 0);
    assert_string_equal(v, "ht_senders=4");
    unsetenv("CCHAN_MOE_VARIANT");
}

static void test_misuse(void **state) {
    (void)state;
    int64_t i;
    int b;
    const char *s;
    const char *unknown[] = {"CCHAN_NO_SUCH_VARIABLE", "not a registered variable", NULL};
    assert_env_error(cchan_env_get_int("CCHAN_NO_SUCH_VARIABLE", &i), unknown);
    const char *type[] = {"CCHAN_EXEC_PDL", "bool", NULL};
    assert_env_error(cchan_env_get_int("CCHAN_EXEC_PDL", &i), type);
    const char *type2[] = {"CCHAN_COLL_TUNING", "str", NULL};
    assert_env_error(cchan_env_get_bool("CCHAN_COLL_TUNING", &b), type2);
    const char *null[] = {"NULL", NULL};
    assert_env_error(cchan_env_get_str(NULL, &s), null);
    assert_env_error(cchan_env_get_str("CCHAN_COLL_TUNING", NULL), null);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry), cmocka_unit_test(test_int),    cmocka_unit_test(test_bool),
        cmocka_unit_test(test_str),      cmocka_unit_test(test_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
