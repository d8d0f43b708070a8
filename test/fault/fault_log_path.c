/* CCHAN_DEBUG_FILE is expanded with bounds: a pattern of about 480 characters ending in %h, with a
 * host name over 32 characters, once wrote a NUL past a 512-byte stack buffer (and cut the path).
 * The expanded path must now name exactly the file the pattern says, and a pattern that expands
 * past PATH_MAX must leave logging on stderr.
 *
 *   fault_log_path long|too-long
 *
 * The host name is set in a new UTS namespace (as root, or in a new user namespace where the
 * kernel allows it); where neither is possible the test skips (77). Run under ASan, the old code
 * fails with stack-buffer-overflow; without it, it opens a cut path and the check below fails. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cchan_test.h"

static const char host[] = "a-host-name-of-sixty-characters-for-the-log-path-test-xxxxxx";

static int new_uts(void) {
    if (unshare(CLONE_NEWUTS) == 0) return 0;
    return unshare(CLONE_NEWUSER | CLONE_NEWUTS);
}

int main(int argc, char **argv) {
    const int too_long = argc > 1 && !strcmp(argv[1], "too-long");
    if (new_uts() != 0 || sethostname(host, strlen(host)) != 0) {
        printf("SKIP: cannot set a host name in a new UTS namespace here (%s)\n", strerror(errno));
        return 77;
    }
    char dir[PATH_MAX], pattern[2 * PATH_MAX], want[2 * PATH_MAX];
    snprintf(dir, sizeof dir, "/tmp/cchan-fault-log-%d", (int)getpid());
    CT_ASSERT(mkdir(dir, 0700) == 0);
    char top[PATH_MAX];
    snprintf(top, sizeof top, "%s", dir);
    /* directories of 100 characters until the pattern is about 480 characters long */
    char seg[101];
    memset(seg, 'd', 100);
    seg[100] = '\0';
    size_t len = strlen(dir);
    while (len + 1 + 100 < (too_long ? (size_t)PATH_MAX + 100 : 420)) {
        snprintf(dir + len, sizeof dir - len, "/%s", seg);
        len = strlen(dir);
        CT_REQUIRE(mkdir(dir, 0700) == 0 || too_long, "mkdir %s: %s", dir, strerror(errno));
    }
    snprintf(pattern, sizeof pattern, "%s/%0*d.%%h", dir, (int)(480 - len - 4), 0);
    snprintf(want, sizeof want, "%s/%0*d.%s", dir, (int)(480 - len - 4), 0, host);
    CT_REQUIRE(strlen(pattern) >= 470 || too_long, "pattern of %zu characters", strlen(pattern));
    setenv("CCHAN_DEBUG", "WARN", 1);
    setenv("CCHAN_DEBUG_FILE", pattern, 1);
    /* a failing call logs its error at WARN */
    CT_ASSERT(cchan_mem_alloc(NULL, 1, 0, NULL) == -EINVAL);
    struct stat st;
    char rm[PATH_MAX + 16];
    snprintf(rm, sizeof rm, "rm -rf '%s'", top);
    if (too_long) {
        CT_ASSERT(system(rm) == 0);
        printf("pattern of %zu characters; expanded past PATH_MAX, logging stayed on stderr\n",
               strlen(pattern));
        return 0;
    }
    CT_EXPECT(stat(want, &st) == 0 && st.st_size > 0, "no log at the %zu-character path %s (%s)",
              strlen(want), want, strerror(errno));
    printf("pattern of %zu characters, log at %zu characters: %s\n", strlen(pattern), strlen(want),
           ct_failures ? "missing" : "ok");
    CT_ASSERT(system(rm) == 0);
    return ct_failures ? 1 : 0;
}
