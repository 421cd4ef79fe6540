/* fuzz_hf.c -- libFuzzer harness for the Hugging Face config.json path of
 * the model loader (ap_graph_load_buffer dispatches on "model_type").
 *
 * The build options come from the input's length so that flash attention,
 * dropout and the default sequence are all reached without a prefix that
 * would make the corpus files something other than real configs. */
#include <stdint.h>
#include <stdlib.h>

#include "graph/graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[AP_ERR_LEN];
    ap_build_opts opt;
    ap_build_opts_default(&opt);
    opt.flash = (int)(size & 1);
    opt.dropout = (int)((size >> 1) & 1);
    if (size & 4)
        opt.seq = 128; /* keeps big configs quick to build */
    ap_graph *g = NULL;
    int rc = ap_graph_from_hf((const char *)data, size, "config.json", &opt,
                              &g, err);
    if (rc == AP_OK) {
        if (!g->finalized || g->total_params <= 0)
            abort();
        (void)ap_graph_active_params(g);
        ap_graph_free(g);
    } else if (g || !err[0]) {
        abort();
    }
    return 0;
}
