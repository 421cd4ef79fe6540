/* fuzz_model.c -- libFuzzer harness for the project-format model loader
 * (ap_graph_load_buffer, which also hands configs with "model_type" to the
 * Hugging Face reader).
 *
 * Any input must either load or be refused with AP_EINPUT and a message; a
 * graph that loads must give the shape the exports state (ap_model_shape_of)
 * and write itself back in the project format and load again from that
 * text, with the same totals. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "planner/planner.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_round_trip(const ap_graph *g)
{
    char err[AP_ERR_LEN];
    char *text = ap_graph_to_json(g);
    if (!text)
        abort();
    ap_graph *back = NULL;
    if (ap_graph_parse_json(text, strlen(text), "round-trip", &back, err) ||
        back->nops != g->nops || back->ntensors != g->ntensors ||
        back->nlayers != g->nlayers || back->total_params != g->total_params)
        abort();
    ap_graph_free(back);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[AP_ERR_LEN];
    ap_build_opts opt;
    ap_build_opts_default(&opt);
    /* Rescaling by --seq and --batch on some inputs, chosen by length so
     * that corpus files stay plain models. */
    if (size & 1)
        opt.seq = 64;
    if (size & 2)
        opt.batch = 3;
    ap_graph *g = NULL;
    int rc = ap_graph_load_buffer((const char *)data, size, "fuzz.json", &opt,
                                  &g, err);
    if (rc == AP_OK) {
        (void)ap_graph_active_params(g);
        /* What the exports state of it: its dimensions, MoE layers, biases. */
        ap_model_shape shape;
        ap_model_shape_of(g, &shape);
        check_round_trip(g);
        ap_graph_free(g);
    } else if (g || !err[0]) {
        abort(); /* a refusal returns nothing and says why */
    }
    return 0;
}
