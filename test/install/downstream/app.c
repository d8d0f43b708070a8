/* Downstream program: links the installed libcchan and checks that header and library agree. */
#include <stdio.h>
#include <string.h>

#include <cchan/cchan.h>

int main(void) {
    printf("cchan_version(): %s\n", cchan_version());
    if (cchan_version_code() != CCHAN_VERSION_CODE) {
        printf("FAIL: library version code %d, header %d\n", cchan_version_code(),
               CCHAN_VERSION_CODE);
        return 1;
    }
    const char *msg = cchan_strerror(CCHAN_ERR_TIMEOUT);
    if (msg == NULL || strlen(msg) == 0) {
        printf("FAIL: cchan_strerror(CCHAN_ERR_TIMEOUT) is empty\n");
        return 1;
    }
    printf("ok: header and library are version %d\n", CCHAN_VERSION_CODE);
    return 0;
}
