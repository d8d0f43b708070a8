/* CCHAN_DEBUG_FILE naming a file that cannot be opened: the log still goes to stderr, and one line
 * on stderr says so, naming the path and the reason (it used to fall back without a word, so a
 * missing log file looked like a quiet run). Its own process: the log is set up once a process. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"

static int count(const char *text, const char *part) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, part)); p += strlen(part)) n++;
    return n;
}

static void test_unopenable_file(void **state) {
    (void)state;
    char dir[] = "/tmp/cchan-logfile-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char pattern[128], path[160], err[] = "/tmp/cchan-logerr-XXXXXX";
    /* a directory that does not exist: fopen fails with ENOENT */
    snprintf(pattern, sizeof pattern, "%s/missing/log-%%p.txt", dir);
    snprintf(path, sizeof path, "%s/missing/log-%d.txt", dir, (int)getpid());
    setenv("CCHAN_DEBUG", "INFO", 1);
    setenv("CCHAN_DEBUG_FILE", pattern, 1);
    int fd = mkstemp(err);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    CCHANI_INFO(CCHANI_SUB_ENV, "first line %d", 1);
    CCHANI_INFO(CCHANI_SUB_ENV, "second line %d", 2);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char text[4096] = {0};
    assert_true(pread(fd, text, sizeof text - 1, 0) >= 0);
    close(fd);
    unlink(err);
    rmdir(dir);
    printf("stderr was:\n%s", text);
    char want[256];
    snprintf(want, sizeof want, "CCHAN_DEBUG_FILE: cannot open '%s' (%s); logging to stderr", path,
             strerror(ENOENT));
    if (count(text, want) != 1) fail_msg("stderr lacks (once) \"%s\"", want);
    assert_int_equal(count(text, "CCHAN_DEBUG_FILE"), 1); /* said once, not per line */
    assert_int_equal(count(text, "first line 1"), 1);     /* the fallback: logged to stderr */
    assert_int_equal(count(text, "second line 2"), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_unopenable_file)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
