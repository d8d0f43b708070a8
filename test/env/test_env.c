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

/* As assert_env_error, for name=text set in the environment: names the value that got through. */
static void assert_refused(int rc, const char *name, const char *text, const char *const *want) {
    if (rc != -EINVAL) fail_msg("%s='%s': call returned %d, want -EINVAL", name, text, rc);
    assert_env_error(rc, want);
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

/* Exactly the documented integer forms (decimal, 0x hex, 0 octal; '-' only where the range has
 * negatives). Before, strtoll took a '+' and leading blanks, so "+4" read as 4. */
static void test_int_forms(void **state) {
    (void)state;
    static const struct {
        const char *name, *text;
        int64_t value;
    } good[] = {{"CCHAN_COLL_ZC_AG_MAX", "0", 0},
                {"CCHAN_COLL_ZC_AG_MAX", "12", 12},
                {"CCHAN_COLL_ZC_AG_MAX", "0x1F", 31},
                {"CCHAN_COLL_ZC_AG_MAX", "010", 8},
                {"CCHAN_COLL_ZC_AG_MAX", "9223372036854775807", INT64_MAX},
                {"CCHAN_COLL_CE_SM_PERMILLE", "-1", -1},
                {"CCHAN_COLL_CE_SM_PERMILLE", "-0", 0}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t v = 5;
        setenv(good[i].name, good[i].text, 1);
        assert_int_equal(cchan_env_get_int(good[i].name, &v), 0);
        assert_int_equal(v, good[i].value);
        unsetenv(good[i].name);
    }
    static const struct {
        const char *name, *text;
    } bad[] = {
        {"CCHAN_COLL_ZC_AG_MAX", "+4"},
        {"CCHAN_COLL_ZC_AG_MAX", "+0x10"},
        {"CCHAN_COLL_ZC_AG_MAX", " 4"},
        {"CCHAN_COLL_ZC_AG_MAX", "\t4"},
        {"CCHAN_COLL_ZC_AG_MAX", "4 "},
        {"CCHAN_COLL_ZC_AG_MAX", "4\n"},
        {"CCHAN_COLL_ZC_AG_MAX", "-0"},
        {"CCHAN_COLL_ZC_AG_MAX", "0x"},
        {"CCHAN_COLL_ZC_AG_MAX", "0x-1"},
        {"CCHAN_COLL_ZC_AG_MAX", "08"},
        {"CCHAN_COLL_ZC_AG_MAX", "-"},
        {"CCHAN_COLL_ZC_AG_MAX", "+"},
        {"CCHAN_COLL_ZC_AG_MAX", "4k"},
        {"CCHAN_COLL_ZC_AG_MAX", "9223372036854775808"},
        {"CCHAN_COLL_ZC_AG_MAX", "0x8000000000000000"},
        {"CCHAN_COLL_CE_SM_PERMILLE", "+1"},
        {"CCHAN_COLL_CE_SM_PERMILLE", "- 1"},
        {"CCHAN_COLL_CE_SM_PERMILLE", "-+1"},
        {"CCHAN_COLL_CE_SM_PERMILLE", "--1"},
        {"CCHAN_COLL_CE_SM_PERMILLE", " -1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v = 5;
        setenv(bad[i].name, bad[i].text, 1);
        const char *want[] = {bad[i].name, bad[i].text, "decimal, 0x hex or 0 octal", NULL};
        assert_refused(cchan_env_get_int(bad[i].name, &v), bad[i].name, bad[i].text, want);
        assert_int_equal(v, 5);
        unsetenv(bad[i].name);
    }
}

/* The runtime's own readers (cchani_env_i64/u64, behind the bootstrap's variables) refuse the
 * same forms. Before, " 1000" read as 1000 ms of bootstrap deadline (strtoull skips blanks), "+5"
 * as port 5 and 2^63 passed the unsigned reader. */
static void test_runtime_readers(void **state) {
    (void)state;
    cchan_unique_id_t id;
    static const struct {
        const char *name, *text, *want;
    } bad[] = {
        {"CCHAN_BOOTSTRAP_PORT", "+0", "not an unsigned integer"},
        {"CCHAN_BOOTSTRAP_PORT", " 0", "not an unsigned integer"},
        {"CCHAN_BOOTSTRAP_PORT", "-0", "not an unsigned integer"},
        {"CCHAN_BOOTSTRAP_PORT", "9223372036854775808", "out of range"},
        {"CCHAN_BOOTSTRAP_PORT", "18446744073709551616", "out of range"},
        {"CCHAN_TEST_WIRE_VERSION", "+1", "not an integer"},
        {"CCHAN_TEST_WIRE_VERSION", " 1", "not an integer"},
        {"CCHAN_TEST_WIRE_VERSION", "-9223372036854775809", "out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(bad[i].name, bad[i].text, 1);
        const char *want[] = {bad[i].name, bad[i].text, bad[i].want, NULL};
        assert_refused(cchan_get_unique_id(&id), bad[i].name, bad[i].text, want);
        unsetenv(bad[i].name);
    }
    /* the accepted forms still work: an id for a free port, then a bootstrap of one rank */
    setenv("CCHAN_BOOTSTRAP_PORT", "0", 1);
    setenv("CCHAN_TEST_WIRE_VERSION", "-0", 1); /* read, then refused by its range: 1..65535 */
    const char *range[] = {"CCHAN_TEST_WIRE_VERSION", "outside 1..65535", NULL};
    assert_env_error(cchan_get_unique_id(&id), range);
    unsetenv("CCHAN_TEST_WIRE_VERSION");
    assert_int_equal(cchan_get_unique_id(&id), 0);
    unsetenv("CCHAN_BOOTSTRAP_PORT");
    static const char *const bad_timeouts[] = {" 1000", "+1000", "1000 ", NULL};
    for (int i = 0; bad_timeouts[i]; i++) {
        cchan_bootstrap_t *bs = NULL;
        setenv("CCHAN_BOOTSTRAP_TIMEOUT_MS", bad_timeouts[i], 1);
        const char *want[] = {"CCHAN_BOOTSTRAP_TIMEOUT_MS", bad_timeouts[i],
                              "decimal, 0x hex or 0 octal", NULL};
        assert_refused(cchan_bootstrap_create(&id, 0, 1, &bs), "CCHAN_BOOTSTRAP_TIMEOUT_MS",
                       bad_timeouts[i], want);
        assert_null(bs);
    }
    cchan_bootstrap_t *bs = NULL;
    setenv("CCHAN_BOOTSTRAP_TIMEOUT_MS", "1000", 1);
    assert_int_equal(cchan_bootstrap_create(&id, 0, 1, &bs), 0);
    assert_int_equal(cchan_bootstrap_destroy(bs), 0);
    unsetenv("CCHAN_BOOTSTRAP_TIMEOUT_MS");
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
        cmocka_unit_test(test_registry),  cmocka_unit_test(test_int),
        cmocka_unit_test(test_int_forms), cmocka_unit_test(test_runtime_readers),
        cmocka_unit_test(test_bool),      cmocka_unit_test(test_str),
        cmocka_unit_test(test_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
