/* Downstream program using only the installed device headers (host backend): a FIFO trigger
 * round-trips through encode and decode. */
#include <stdio.h>

#include <cchan/fifo.h>

int main(void) {
    cchan_trigger_t t = cchan_trigger_encode(CCHAN_TRIGGER_PUT | CCHAN_TRIGGER_SIGNAL, 7, 4096,
                                             (1ull << 36) + 8, 12345);
    cchan_trigger_fields_t f = cchan_trigger_decode(t);
    if (f.type != (CCHAN_TRIGGER_PUT | CCHAN_TRIGGER_SIGNAL) || f.channel != 7 ||
        f.dst_off != 4096 || f.src_off != (1ull << 36) + 8 || f.bytes != 12345) {
        printf("FAIL: trigger did not round-trip\n");
        return 1;
    }
    printf("ok: device headers usable through cchan::headers\n");
    return 0;
}
