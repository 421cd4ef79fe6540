/* fuzz_plan.c -- libFuzzer harness for the plan.json reader behind
 * `autopar export`: any input either parses into a description that frees
 * cleanly, or is refused with a message. */
#include <stdint.h>
#include <stdlib.h>

#include "planner/planner.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 20)
        return 0;
    ap_plan_desc d;
    char err[AP_ERR_LEN];
    err[0] = 0;
    int rc = ap_plan_desc_parse((const char *)data, size, "plan.json", &d, err);
    if (rc == AP_OK)
        ap_plan_desc_free(&d);
    else if (!err[0])
        abort(); /* a refusal must say why */
    return 0;
}
