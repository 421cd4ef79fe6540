/* test_megatron_legacy.c -- command lines of Megatron-LM before 2022 read
 * as those versions meant them, since the published runs of 2020 and 2021
 * were launched with them: v1's --model-parallel-size (tensor parallelism)
 * and --batch-size (each replica's micro-batch, no accumulation), v2's
 * --checkpoint-activations (full recomputation in chunks of
 * --checkpoint-num-layers) and the --activations-checkpoint-* flags of late
 * 2021, --DDP-impl torch; a flag with its successor is refused, as no
 * version takes both. A command line without --global-batch-size trains
 * one micro-batch per replica, Megatron-LM's default. */
#include "model.h"

/* GPT 1.7B as Megatron-LM ran it before 2022: the attention's scores
 * materialised, dropout after attention and MLP. */
static ap_graph *gpt(void)
{
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = 2048;
    o.flash = 0;
    o.dropout = 1;
    return ap_test_model_with("bench/validation/models/megatron-gpt-1.7b.json", &o);
}

/* Two command lines and a spec that must price alike. */
static void same_step(const ap_graph *g, int gpus, const char *a, const char *b)
{
    ap_plan p, q;
    if (ap_test_megatron_plan_ok(g, gpus, a, NULL, &p) ||
        ap_test_megatron_plan_ok(g, gpus, b, NULL, &q)) {
        CHECK(0);
        return;
    }
    if (p.step_time != q.step_time || p.max_mem_bytes != q.max_mem_bytes)
        fprintf(stderr, "%s: %.6f s, %s: %.6f s\n", a, p.step_time, b, q.step_time);
    CHECK(p.step_time == q.step_time);
    CHECK(p.max_mem_bytes == q.max_mem_bytes);
    CHECK(p.global_batch == q.global_batch);
    ap_plan_free(&p);
    ap_plan_free(&q);
}

static void checkpoint_activations_is_full_recomputation_of_each_layer(void)
{
    ap_graph *g = gpt();
    const char *layout = "--tensor-model-parallel-size 2 --micro-batch-size 1 "
                         "--global-batch-size 64";
    char a[256], b[256];
    snprintf(a, sizeof a, "%s --checkpoint-activations", layout);
    same_step(g, 8, a, "tp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0,recompute=full,"
                       "recompute_method=uniform,recompute_layers=1");
    snprintf(a, sizeof a, "%s --checkpoint-activations --checkpoint-num-layers 2", layout);
    snprintf(b, sizeof b, "%s --recompute-granularity full --recompute-method uniform "
                          "--recompute-num-layers 2", layout);
    same_step(g, 8, a, b);
    snprintf(a, sizeof a, "%s --activations-checkpoint-method block "
                          "--activations-checkpoint-num-layers 4", layout);
    snprintf(b, sizeof b, "%s --recompute-granularity full --recompute-method block "
                          "--recompute-num-layers 4", layout);
    same_step(g, 8, a, b);
    /* The chunk size alone recomputes nothing, as in Megatron-LM. */
    snprintf(a, sizeof a, "%s --checkpoint-num-layers 2", layout);
    same_step(g, 8, a, layout);
    ap_graph_free(g);
}

static void version_one_flags_set_the_layout_and_its_backward(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--model-parallel-size 4 --batch-size 8", &m, err), err);
    CHECK(m.tp == 4 && m.mbs == 8 && m.run.tp_sync == 1);
    /* v1 had no accumulation: 8 sequences on each of the 2 replicas. */
    ap_graph *g = gpt();
    same_step(g, 8, "--model-parallel-size 4 --batch-size 8",
              "tp=4,mbs=8,gbs=16,sp=0,zero=0,overlap_grad=0,tp_sync=1");
    ap_graph_free(g);
}

/* Megatron-LM had no fused attention before 2023, and its dropout
 * defaults to 0.1: a model built with flash attention is not the one such
 * a command line trains. */
static void such_a_line_trains_unfused_attention_with_dropout(void)
{
    ap_megatron m;
    char err[AP_ERR_LEN];
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--checkpoint-activations", &m, err), err);
    CHECK(m.shape.flash < 0 && m.shape.dropout == 1);
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--checkpoint-activations --hidden-dropout 0 "
                                      "--attention-dropout 0", &m, err), err);
    CHECK(m.shape.dropout == -1);
    ap_graph *g = ap_test_model("bench/validation/models/megatron-gpt-1.7b.json", 2048);
    ap_plan p;
    CHECK(ap_test_megatron_plan(g, 8, "--tensor-model-parallel-size 2 --checkpoint-activations",
                                NULL, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "its flags are Megatron-LM's before 2022, which had no fused attention");
    ap_plan_free(&p);
    ap_graph_free(g);
}

/* PyTorch's DDP reduces the gradients in buckets during the backward, and
 * Megatron-LM holds its reduction back until the last micro-batch without
 * pipelining: overlap_grad=1. What it cannot run is refused. */
static void torch_ddp_overlaps_the_reduction_with_the_backward(void)
{
    ap_graph *g = gpt();
    const char *layout = "--tensor-model-parallel-size 2 --micro-batch-size 1 "
                         "--global-batch-size 64 --fp16";
    char a[256];
    snprintf(a, sizeof a, "%s --DDP-impl torch", layout);
    same_step(g, 8, a, "tp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=1");
    snprintf(a, sizeof a, "%s --DDP-impl local", layout);
    same_step(g, 8, a, "tp=2,mbs=1,gbs=64,sp=0,zero=0,overlap_grad=0");
    ap_graph_free(g);
    const char *refused[][2] = {
        {"--DDP-impl torch --fp16 --pipeline-model-parallel-size 2", "under pipeline parallelism"},
        {"--DDP-impl torch --fp16 --use-distributed-optimizer", "--use-distributed-optimizer"},
        {"--DDP-impl torch --bf16", "in fp32, which it does in its local DDP only"},
        {"--DDP-impl xla", "--DDP-impl: bad value \"xla\" (local or torch)"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        ap_megatron m;
        char err[AP_ERR_LEN] = "";
        ap_megatron_default(&m);
        CHECK(ap_megatron_parse_args(refused[i][0], &m, err) == AP_EINPUT);
        CHECK_STR_HAS(err, refused[i][1]);
    }
}

static void a_flag_with_its_successor_is_refused(void)
{
    const char *lines[][2] = {
        {"--model-parallel-size 2 --tensor-model-parallel-size 2",
         "--model-parallel-size is Megatron-LM's flag before --tensor-model-parallel-size"},
        {"--batch-size 2 --micro-batch-size 2",
         "--batch-size is Megatron-LM's flag before --micro-batch-size"},
        {"--checkpoint-activations --recompute-granularity full --recompute-method uniform",
         "--checkpoint-activations is Megatron-LM's flag before --recompute-granularity"},
        {"--activations-checkpoint-method uniform --recompute-activations",
         "--activations-checkpoint-method is Megatron-LM's flag before"},
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        ap_megatron m;
        char err[AP_ERR_LEN] = "";
        ap_megatron_default(&m);
        CHECK(ap_megatron_parse_args(lines[i][0], &m, err) == AP_EINPUT);
        CHECK_STR_HAS(err, lines[i][1]);
    }
    ap_megatron m;
    char err[AP_ERR_LEN] = "";
    ap_megatron_default(&m);
    CHECK(ap_megatron_parse_args("--activations-checkpoint-method sometimes", &m, err) ==
          AP_EINPUT);
    CHECK_STR_HAS(err, "--activations-checkpoint-method");
    CHECK_STR_HAS(err, "sometimes");
    CHECK(ap_megatron_parse_args("--checkpoint-num-layers 0", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--checkpoint-num-layers: bad value \"0\"");
}

/* Megatron-LM's validate_args sets the global batch to mbs * dp where the
 * command line does not give it: 16 GPUs at tp 2 are 8 replicas. */
static void without_a_global_batch_each_replica_trains_one_micro_batch(void)
{
    ap_graph *g = gpt();
    ap_plan p;
    if (ap_test_megatron_plan_ok(g, 16, "--tensor-model-parallel-size 2 --micro-batch-size 2",
                                 NULL, &p) == AP_OK) {
        CHECK(p.global_batch == 16);
        CHECK(p.nmicro == 1);
        ap_plan_free(&p);
    } else {
        CHECK(0);
    }
    same_step(g, 16, "--tensor-model-parallel-size 2 --micro-batch-size 2",
              "tp=2,mbs=2,gbs=16,sp=0,zero=0,overlap_grad=0");
    ap_graph_free(g);
}

int main(void)
{
    RUN(checkpoint_activations_is_full_recomputation_of_each_layer);
    RUN(version_one_flags_set_the_layout_and_its_backward);
    RUN(such_a_line_trains_unfused_attention_with_dropout);
    RUN(torch_ddp_overlaps_the_reduction_with_the_backward);
    RUN(a_flag_with_its_successor_is_refused);
    RUN(without_a_global_batch_each_replica_trains_one_micro_batch);
    return DONE();
}
