/* cchan-run: placeholder until the launcher lands (bootstrap work). */
#include <stdio.h>
int main(void) {
    fprintf(stderr, "cchan-run: not built yet\n");
    return 1;
}
