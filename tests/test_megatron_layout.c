/* Megatron-LM's --pipeline-model-parallel-layout (the spec's layout=): the
 * string read as Megatron-Core reads it, every virtual stage holding the
 * layers it names, and each model chunk priced with its own layers, the
 * embedding on the first chunk and the head on the last. */
#include "model.h"

#include "planner/layout.h"
#include "planner/planner.h"

/* Megatron-Core's own example (PipelineParallelLayerLayout.parse_str_to_list):
 * "Ettt|(tt|)*29,m|L" is [E,t,t,t] + [t,t]*29 + [m] + [L]. */
static void the_string_unrolls_as_megatron_core_unrolls_it(void)
{
    ap_pipe_layout l;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_layout_parse("Ettt|(tt|)*29,m|L", "layout", &l, err), err);
    CHECK(l.nstages == 32);
    CHECK(l.layers[0] == 3);
    int twos = 0;
    for (int i = 1; i <= 29; i++)
        twos += l.layers[i] == 2;
    CHECK(twos == 29);
    CHECK(l.layers[30] == 0 && l.layers[31] == 0);
    CHECK(l.total == 61);
    CHECK(l.mtp == 1 && l.embeddings == 1 && l.losses == 1);
    CHECK(l.embedding_at == 0 && l.loss_at == 31);
    CHECK(l.embedding_first && l.loss_last);
    ap_layout_free(&l);
    /* "x*n" repeats any one character, '|' included, after the groups. */
    REQUIRE_OK(ap_layout_parse("Et*2|*3t*2L", "layout", &l, err), err);
    CHECK(l.nstages == 4 && l.layers[0] == 2 && l.layers[1] == 0 && l.layers[2] == 0 &&
          l.layers[3] == 2);
    ap_layout_free(&l);
}

static void bad_strings_are_refused_with_the_fault(void)
{
    ap_pipe_layout l;
    char err[AP_ERR_LEN];
    CHECK(ap_layout_parse("Et|x|L", "layout", &l, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "unknown layer 'x'");
    CHECK(ap_layout_parse("E(tt|*2L", "layout", &l, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "'(' without its ')'");
    CHECK(ap_layout_parse("E((t|)*2)*2L", "layout", &l, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "nested parentheses");
    CHECK(ap_layout_parse("E(tt|)L", "layout", &l, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "a group needs content and a count");
    CHECK(ap_layout_parse("Et*0|L", "layout", &l, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "a count of 1 or more");
    CHECK(ap_layout_parse("E(t|)*99999999L", "layout", &l, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "too many");
}

/* The writer folds runs of equal middle stages, and what it writes reads
 * back as the same stages. */
static void a_written_layout_reads_back(void)
{
    const int layers[] = {3, 4, 4, 4, 4, 3};
    char buf[128];
    char err[AP_ERR_LEN];
    CHECK(ap_layout_format(layers, 6, 0, buf, sizeof buf) > 0);
    CHECK(!strcmp(buf, "Et*3|(t*4|)*4t*3L"));
    ap_pipe_layout l;
    REQUIRE_OK(ap_layout_parse(buf, "layout", &l, err), err);
    CHECK(l.nstages == 6);
    for (int i = 0; i < 6; i++)
        CHECK(l.layers[i] == layers[i]);
    ap_layout_free(&l);
    const int two[] = {1, 0};
    CHECK(ap_layout_format(two, 2, 0, buf, sizeof buf) > 0 && !strcmp(buf, "Et|L"));
    CHECK(ap_layout_format(layers, 6, 0, buf, 8) == -1);
}

/* Without interleaving a layout is uneven stages: "Et*12|t*12L" is the
 * even split of gpt-1.3b's 24 layers over pp 2 and prices as it, and
 * moving a layer from the first stage to the second moves one layer's
 * forward between them. */
static void a_layout_without_interleaving_is_uneven_stages(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    ap_plan even, same, moved;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 8, "tp=1,pp=2,mbs=1,gbs=64", NULL, &even), "even");
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 8, "tp=1,pp=2,mbs=1,gbs=64,layout=Et*12|t*12L",
                                        NULL, &same), "layout");
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 8, "tp=1,pp=2,mbs=1,gbs=64,layout=Et*11|t*13L",
                                        NULL, &moved), "moved");
    CHECK(same.vchunks == 1 && same.chunk_layers == NULL);
    CHECK(same.step_time == even.step_time);
    CHECK(moved.stages[0].nlayers == 11 && moved.stages[1].nlayers == 13);
    CHECK(moved.stages[1].first_layer == 11);
    double layer = ap_test_layer(&even)->fwd;
    CHECK_NEAR(moved.stages[1].fwd - even.stages[1].fwd, layer, 1e-9);
    CHECK_NEAR(even.stages[0].fwd - moved.stages[0].fwd, layer, 1e-9);
    ap_plan_free(&even);
    ap_plan_free(&same);
    ap_plan_free(&moved);
    ap_graph_free(g);
}

/* "Et*5|t*7|t*7|t*5L" over pp 2 is two chunks a stage: stage 0 holds
 * layers 0-4 and 12-18, stage 1 layers 5-11 and 19-23. Each chunk is
 * priced with its own layers; the embedding rides on stage 0's first
 * chunk and the head on stage 1's last, and the chunks add up to the
 * stage. */
static void each_chunk_holds_and_prices_its_own_layers(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    ap_plan p;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 8, "tp=1,pp=2,mbs=1,gbs=64,layout=Et*5|t*7|t*7|t*5L",
                                        NULL, &p), "layout");
    CHECK(p.vchunks == 2 && p.schedule == AP_SCHED_INTERLEAVED);
    CHECK(p.chunk_layers && p.chunk_layers[0] == 5 && p.chunk_layers[1] == 7 &&
          p.chunk_layers[2] == 7 && p.chunk_layers[3] == 5);
    CHECK(p.stages[0].nlayers == 12 && p.stages[1].nlayers == 12);
    CHECK(p.stages[0].first_layer == 0 && p.stages[1].first_layer == 5);
    const int want[2][12] = {{0, 1, 2, 3, 4, 12, 13, 14, 15, 16, 17, 18},
                             {5, 6, 7, 8, 9, 10, 11, 19, 20, 21, 22, 23}};
    int mapped = 1;
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 12; k++) {
            int chunk, pos, layer;
            ap_stage_chunk_of(&p, s, k, &chunk, &pos, &layer);
            mapped &= layer == want[s][k];
            mapped &= chunk == (s == 0 ? k >= 5 : k >= 7);
        }
    CHECK(mapped);
    double f = ap_test_layer(&p)->fwd;
    const ap_stage *a = &p.stages[0], *b = &p.stages[1];
    const ap_block_point *pre = &a->blocks[0].points[a->point[0]];
    const ap_block_point *post = &b->blocks[1].points[b->point[1]];
    CHECK_NEAR(a->chunk_fwd[0], 5 * f + pre->fwd, 1e-12);
    CHECK_NEAR(a->chunk_fwd[1], 7 * f, 1e-12);
    CHECK_NEAR(b->chunk_fwd[0], 7 * f, 1e-12);
    CHECK_NEAR(b->chunk_fwd[1], 5 * f + post->fwd, 1e-12);
    for (int s = 0; s < 2; s++) {
        const ap_stage *st = &p.stages[s];
        CHECK_NEAR(st->chunk_fwd[0] + st->chunk_fwd[1], st->fwd, 1e-12);
        CHECK_NEAR(st->chunk_bwd[0] + st->chunk_bwd[1], st->bwd, 1e-12);
        CHECK_NEAR(st->chunk_act[0] + st->chunk_act[1], 1, 1e-12);
    }
    /* A layer's activations against the embedding's: stage 1's first chunk
     * keeps 7 layers' worth of its stage's 12 layers and the head's. */
    double act = ap_test_layer(&p)->act_bytes;
    CHECK_NEAR(b->chunk_act[0], 7 * act / (12 * act + post->act_bytes), 1e-12);
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* Full recomputation checkpoints each chunk on its own: uniform 2 splits
 * a chunk of 4 layers into two groups, and needs every chunk's layers to
 * be a multiple of 2, as Megatron-LM's last group would run past them. */
static void recomputation_groups_stay_inside_each_chunk(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    ap_plan p;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 8, "tp=1,pp=2,mbs=1,gbs=64,recompute=full,"
                                        "recompute_layers=2,layout=Et*4|t*8|t*8|t*4L",
                                        NULL, &p), "layout");
    CHECK(p.stages[0].recomputed_layers == 12);
    ap_plan_free(&p);
    CHECK(ap_test_megatron_plan(g, 8, "tp=1,pp=2,mbs=1,gbs=64,recompute=full,"
                                "recompute_layers=2,layout=Et*5|t*7|t*7|t*5L", NULL, &p,
                                err) == AP_EINPUT);
    CHECK_STR_HAS(err, "must divide the 5 layers of stage 0's virtual stages");
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* Megatron-LM's flag prices as the spec's key, its quotes dropped. */
static void the_flag_prices_as_the_key(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    ap_plan a, b;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 8, "tp=1,pp=2,mbs=1,gbs=64,zero=0,overlap_grad=0,"
                                        "layout=Et*5|t*7|t*7|t*5L", NULL, &a), "spec");
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 8, "--pipeline-model-parallel-size 2 "
                                        "--micro-batch-size 1 --global-batch-size 64 "
                                        "--pipeline-model-parallel-layout 'Et*5|t*7,|t*7|t*5L'",
                                        NULL, &b), "flags");
    CHECK(a.step_time == b.step_time);
    CHECK(b.vchunks == 2);
    ap_plan_free(&a);
    ap_plan_free(&b);
    ap_graph_free(g);
}

static void refused(const ap_graph *g, const char *spec, const char *want)
{
    ap_plan p;
    char err[AP_ERR_LEN];
    CHECK(ap_test_megatron_plan(g, 8, spec, NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, want);
    ap_plan_free(&p);
}

/* What Megatron-Core's validate_layer_layout asserts, what autopar does
 * not model, and the flags Megatron-LM refuses beside a layout. */
static void layouts_megatron_or_autopar_cannot_run_are_refused(void)
{
    ap_graph *g = ap_test_model("examples/gpt-1.3b.json", 0);
    const char *base = "tp=1,pp=2,mbs=1,gbs=64,";
    char spec[256];
    const struct {
        const char *layout, *want;
    } cases[] = {
        {"Et*12|t*11L", "places 23 transformer layers ('t'); the model has 24"},
        {"t*12|t*12L", "needs the embedding 'E' exactly once, not 0 times"},
        {"Et*12|t*12", "needs the loss 'L' exactly once, not 0 times"},
        {"tEt*11|t*12L", "its first layer must be the embedding 'E'"},
        {"Et*12|t*12mL", "places 1 multi-token-prediction layers ('m')"},
        {"Et*8|t*8|t*8L", "its 3 virtual stages do not divide over pp=2"},
        {"|Et*12|t*12|L", "puts the embedding on virtual stage 1"},
        {"Et*24|L", "pipeline rank 1 holds no transformer layer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(spec, sizeof spec, "%slayout=%s", base, cases[i].layout);
        refused(g, spec, cases[i].want);
    }
    refused(g, "tp=1,pp=2,mbs=1,gbs=64,layout=Et*12|t*11tLt", "its last layer must be the "
            "loss 'L'");
    refused(g, "tp=1,pp=2,mbs=1,gbs=64,first=10,layout=Et*12|t*12L",
            "cannot be combined with first=N,last=N");
    refused(g, "tp=1,pp=2,mbs=1,gbs=64,account_loss=1,layout=Et*12|t*12L",
            "cannot be combined with account_embedding/account_loss");
    refused(g, "tp=1,pp=2,mbs=1,gbs=64,vpp=3,layout=Et*6|t*6|t*6|t*6L",
            "vpp=3 contradicts the layout's 2 virtual stages per pipeline rank");
    refused(g, "--pipeline-model-parallel-size 2 --global-batch-size 64 "
            "--num-layers-per-virtual-pipeline-stage 6 "
            "--pipeline-model-parallel-layout Et*6|t*6|t*6|t*6L",
            "Megatron-LM takes no more than one of them");
    refused(g, "--pipeline-model-parallel-size 2 --global-batch-size 64 "
            "--num-virtual-stages-per-pipeline-rank 2 "
            "--pipeline-model-parallel-layout Et*6|t*6|t*6|t*6L",
            "Megatron-LM takes no more than one of them");
    refused(g, "tp=1,pp=2,mbs=1,gbs=64,layout=", "empty");
    ap_graph_free(g);
}

/* The spec written back (ap_megatron_format) carries the layout without
 * Megatron's cosmetic commas, and reads back to the same configuration. */
static void the_spec_writes_the_layout_back(void)
{
    ap_megatron m, n;
    char err[AP_ERR_LEN], buf[512];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--pipeline-model-parallel-size 2 "
                                      "--pipeline-model-parallel-layout \"Et*5|t*7,|t*7|t*5L\"",
                                      &m, err), err);
    CHECK(!strcmp(m.layout, "Et*5|t*7,|t*7|t*5L"));
    ap_megatron_format(&m, buf, sizeof buf);
    CHECK_STR_HAS(buf, ",layout=Et*5|t*7|t*7|t*5L");
    ap_megatron_default(&n);
    REQUIRE_OK(ap_megatron_parse(buf, &n, err), err);
    CHECK(!strcmp(n.layout, "Et*5|t*7|t*7|t*5L"));
}

int main(void)
{
    RUN(the_string_unrolls_as_megatron_core_unrolls_it);
    RUN(bad_strings_are_refused_with_the_fault);
    RUN(a_written_layout_reads_back);
    RUN(a_layout_without_interleaving_is_uneven_stages);
    RUN(each_chunk_holds_and_prices_its_own_layers);
    RUN(recomputation_groups_stay_inside_each_chunk);
    RUN(the_flag_prices_as_the_key);
    RUN(layouts_megatron_or_autopar_cannot_run_are_refused);
    RUN(the_spec_writes_the_layout_back);
    return DONE();
}
