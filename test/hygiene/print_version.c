/* Prints what the built library says its version is, for check-version.sh. */
#include <stdio.h>

#include "cchan/cchan.h"

int main(void) {
    printf("%s\n%d\n", cchan_version(), cchan_version_code());
    return 0;
}
