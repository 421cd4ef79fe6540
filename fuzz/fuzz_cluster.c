/* fuzz_cluster.c -- libFuzzer harness for the cluster-file reader
 * (costmodel/cluster_json.c).
 *
 * A cluster that loads is written back and read again, and priced: the cost
 * functions interpolate the measured tables it carries, and every price must
 * be a finite, non-negative number of seconds. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel/costmodel.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_time(double t)
{
    if (!(t >= 0) || !isfinite(t))
        abort();
}

static void price(const ap_cluster *c)
{
    static const double sizes[] = {1, 1e3, 1e6, 1e9};
    int gpus = ap_cluster_gpus(c);
    for (int i = 0; i < 4; i++) {
        double s = sizes[i];
        check_time(ap_cost_gemm(c, AP_BF16, s, s, s));
        check_time(ap_cost_gemm(c, AP_FP32, s, 1, s));
        check_time(ap_cost_memop(c, s, s));
        check_time(ap_cost_attention(c, AP_BF16, 8, 1024, 1024, 128, 128, 1));
        for (int op = 0; op < AP_NCOLL; op++) {
            check_time(ap_cost_collective(c, (ap_coll)op, 2, 1, s * 1e3));
            check_time(ap_cost_collective(c, (ap_coll)op, gpus, c->nodes,
                                          s * 1e3));
        }
    }
    (void)ap_cluster_usable_bytes(c);
    check_time(1 / ap_cluster_hbm_bw(c));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[AP_ERR_LEN];
    ap_cluster c;
    err[0] = 0;
    int rc = ap_cluster_parse((const char *)data, size, "fuzz-cluster.json",
                              0, 0, &c, err);
    if (rc != AP_OK) {
        if (!err[0])
            abort();
        return 0;
    }
    price(&c);
    char *text = ap_cluster_to_json(&c);
    ap_cluster back;
    if (!text || ap_cluster_parse(text, strlen(text), "round-trip", 0, 0,
                                  &back, err))
        abort();
    if (back.ngemm != c.ngemm || back.ncoll != c.ncoll ||
        ap_cluster_gpus(&back) != ap_cluster_gpus(&c))
        abort();
    ap_cluster_free(&back);
    free(text);
    ap_cluster_free(&c);
    return 0;
}
