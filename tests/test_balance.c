/* The search's interleaving for stages of uneven layers, and its moves of
 * layers off the model chunks that carry the embedding and the head
 * (planner/balance.c). */
#include "model.h"

#include "planner/layout.h"
#include "planner/planner.h"

/* Llama 3.1 405B's 126 layers on 512 H100s, 32 sequences a step: the stage
 * DP cuts 16 stages of 7 and 8 layers, which no chunk count divides. The
 * search interleaves them anyway, four chunks a stage, and takes a layer
 * off the very first chunk (beside the embedding) and off the very last
 * (beside the output layer over 128,256 tokens and the loss): Meta's and
 * Megatron-LM's --account-for-*-in-pipeline-split layout, found by
 * pricing. Every layer sits in one chunk, each stage's chunks hold its
 * layers, and the chunks as the stages' spans cut evenly price slower. */
static void uneven_stages_interleave_with_the_head_chunk_lightened(void)
{
    ap_graph *g = ap_test_model("examples/hf/llama-3.1-405b.json", 0);
    ap_cluster c;
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(g != NULL);
    if (!g)
        return;
    ap_plan_opts o = ap_test_search_opts(512, 32);
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 512, 8, &c, err), err);
    REQUIRE_OK(ap_plan_search(g, &c, &o, &p, err), err);
    CHECK(p.nstages == 16 && p.vchunks == 4 && p.schedule == AP_SCHED_INTERLEAVED);
    CHECK(p.chunk_layers != NULL);
    if (!p.chunk_layers) {
        ap_plan_free(&p);
        ap_cluster_free(&c);
        ap_graph_free(g);
        return;
    }
    int n = p.nstages * p.vchunks;
    CHECK(p.chunk_layers[0] == 1 && p.chunk_layers[n - 1] == 1);
    int *seen = calloc((size_t)g->nlayers, sizeof *seen), once = 1;
    for (int s = 0; s < p.nstages; s++) {
        int sum = 0;
        for (int ch = 0; ch < p.vchunks; ch++)
            sum += p.chunk_layers[ch * p.nstages + s];
        CHECK(sum == p.stages[s].nlayers);
        for (int k = 0; k < p.stages[s].nlayers; k++) {
            int chunk, pos, layer;
            ap_stage_chunk_of(&p, s, k, &chunk, &pos, &layer);
            once &= layer >= 0 && layer < g->nlayers && !seen[layer]++;
        }
    }
    for (int l = 0; l < g->nlayers; l++)
        once &= seen[l] == 1;
    CHECK(once);
    free(seen);
    char layout[1024];
    CHECK(ap_layout_format(p.chunk_layers, n, 0, layout, sizeof layout) > 0);
    CHECK(!strcmp(layout, "Et|(t*2|)*62tL"));
    double balanced = p.step_time;
    int *even = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; even && i < n; i++) {
        int layers = p.stages[i % p.nstages].nlayers, ch = i / p.nstages;
        even[i] = layers / p.vchunks + (ch < layers % p.vchunks);
    }
    ap_plan_set_chunks(&p, even);
    REQUIRE_OK(ap_plan_evaluate(g, &c, &p, err), err);
    CHECK(p.step_time > balanced);
    ap_plan_free(&p);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

int main(void)
{
    RUN(uneven_stages_interleave_with_the_head_chunk_lightened);
    return DONE();
}
