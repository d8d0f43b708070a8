/* Prints the environment registry, one variable a line: name, type, reader (tab-separated). */
#include <stdio.h>

#include "cchan/env.h"

int main(void) {
    static const char *types[] = {"?", "int", "bool", "str"};
    for (int i = 0; i < cchan_env_count(); i++) {
        const cchan_env_var_t *e = cchan_env_at(i);
        printf("%s\t%s\t%s\n", e->name, types[e->type <= CCHAN_ENV_STR ? e->type : 0], e->reader);
    }
    return 0;
}
