/* FP8 training as Transformer Engine runs it under Megatron-LM: the linear
 * layers' GEMMs at the FP8 peak plus their casts, attention and the LM head
 * untouched, half the saved input, refused on GPUs without FP8, the flag
 * and spec parsed, plan.json carrying it, and a whole step that gains less
 * than its GEMMs could. */
#include <cjson/cJSON.h>

#include "model.h"

#include "planner/planner.h"

static ap_graph *llama(void)
{
    return ap_test_model("bench/validation/models/llama-2-7b.json", 4096);
}

static double dim_of(const ap_graph *g, ap_dim_kind k)
{
    return (double)ap_graph_dim(g, ap_graph_label_of(g, k))->size;
}

/* One GPU, one sequence per micro-batch, eight micro-batches per step. */
typedef struct {
    ap_cluster c;
    ap_mesh mesh;
    ap_price_ctx x;
} one_gpu;

static int one_gpu_init(one_gpu *u, const ap_graph *g, int fp8)
{
    char err[AP_ERR_LEN];
    if (ap_cluster_preset("h100-sxm", 1, 0, &u->c, err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    ap_mesh_init(&u->mesh, 1, 1, 0, u->c.gpus_per_node);
    u->x = (ap_price_ctx){.g = g, .c = &u->c, .mesh = &u->mesh, .batch = 1, .nmicro = 8,
                          .zero = AP_ZERO_1, .run.fp8 = fp8};
    return 0;
}

static ap_op_cost price(const ap_price_ctx *x, const char *op)
{
    ap_strategy s = {{0, 0}, {0, 0}};
    ap_op_cost c;
    ap_price_op(x, ap_graph_find_op(x->g, op), &s, &c);
    return c;
}

/* TE's cast with transpose: read 2 bytes, write 1 + 1, one amax compare. */
static double cast(const ap_cluster *c, double elems)
{
    return ap_cost_memop(c, elems, 4 * elems);
}

/* TE's transpose of an FP8 tensor: read 1 byte, write 1. */
static double transpose(const ap_cluster *c, double elems)
{
    return ap_cost_memop(c, 0, 2 * elems);
}

static void only_the_layers_linear_layers_run_in_fp8(void)
{
    ap_graph *g = llama();
    if (!g) {
        CHECK(0);
        return;
    }
    const char *fp8[] = {"l0.q", "l0.k", "l0.v", "l0.o", "l0.mlp.gate", "l0.mlp.up",
                         "l0.mlp.down", "l31.mlp.down"};
    const char *not_fp8[] = {"embed", "l0.attn", "l0.ln1", "l0.mlp.silu", "lm_head", "loss"};
    for (size_t i = 0; i < sizeof fp8 / sizeof fp8[0]; i++)
        CHECK(ap_fp8_linear(g, ap_graph_find_op(g, fp8[i])));
    for (size_t i = 0; i < sizeof not_fp8 / sizeof not_fp8[0]; i++)
        CHECK(ap_graph_find_op(g, not_fp8[i]) >= 0 &&
              !ap_fp8_linear(g, ap_graph_find_op(g, not_fp8[i])));
    ap_graph_free(g);
}

static void a_linear_layer_takes_the_fp8_gemm_time_plus_its_casts(void)
{
    ap_graph *g = llama();
    one_gpu u;
    if (!g || one_gpu_init(&u, g, 1)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    /* up: [s, h] x [h, f] -> [s, f] for one sequence of 4096 tokens. */
    double m = dim_of(g, AP_DIM_SEQ), k = dim_of(g, AP_DIM_HIDDEN), n = dim_of(g, AP_DIM_FFN);
    double gemm = ap_cost_gemm(&u.c, AP_FP8, m, n, k);
    ap_op_cost c = price(&u.x, "l0.mlp.up");
    /* Forward: input cast every micro-batch, weight cast once in 8. Gate
     * and up are one module in Megatron (linear_fc1, with the norm before
     * them fused in: LayerNormLinear), which quantizes its input once, so
     * each carries half. Under delayed scaling that norm writes FP8 itself,
     * leaving the transpose for wgrad. */
    CHECK_NEAR(c.fwd, gemm + transpose(&u.c, m * k) / 2 + cast(&u.c, k * n) / 8, 1e-12);
    /* Backward: dgrad (m x k, contracting n) and wgrad (k x n, contracting
     * the tokens) in FP8, each at its own shape; the data gradient is
     * stored in bf16, the weight gradient accumulated into the bf16
     * main_grad (read and written), and the output gradient cast. */
    double dgrad = ap_cost_bgemm_out(&u.c, AP_FP8, 1, m, k, n, 2);
    double wgrad = ap_cost_bgemm_out(&u.c, AP_FP8, 1, k, n, m, 2 * 2);
    CHECK_NEAR(c.bwd, dgrad + wgrad + cast(&u.c, m * n), 1e-12);
    CHECK(wgrad > gemm && dgrad < gemm);
    /* The FP8 peak is twice bf16's at 75.54/84.48 of bf16's efficiency
     * (the measured ratio, docs/cluster-format.md): the multiply alone
     * takes 0.56 of bf16's; the bf16 store of the output is the same. */
    u.x.run.fp8 = 0;
    ap_op_cost b = price(&u.x, "l0.mlp.up");
    double out = 2 * m * n / ap_cluster_hbm_bw(&u.c);
    CHECK_NEAR(b.fwd, ap_cost_gemm(&u.c, AP_BF16, m, n, k), 1e-12);
    CHECK_NEAR((ap_cost_gemm(&u.c, AP_BF16, m, n, k) - out) / (gemm - out),
               1979.0 / 989.0 * 75.54 / 84.48, 0.02);
    CHECK(c.fwd < b.fwd && c.fwd > b.fwd / 2);
    ap_cluster_free(&u.c);
    ap_graph_free(g);
}

/* Three linear layers of Llama 2 7B's first layer, one sequence: the
 * elements of their input, weight and output; whether TE fuses the norm
 * before them into the layer (QKV's LayerNormLinear), finding the input's
 * amax; and how many projections share the input's cast (q, k and v:
 * linear_qkv). */
typedef struct {
    const char *op;
    double in, w, out;
    int fused;
    double share;
} cast_case;

static void cast_cases(const ap_graph *g, cast_case cc[3])
{
    double s = dim_of(g, AP_DIM_SEQ), h = dim_of(g, AP_DIM_HIDDEN), f = dim_of(g, AP_DIM_FFN);
    cc[0] = (cast_case){"l0.q", s * h, h * h, s * h, 1, 3};
    cc[1] = (cast_case){"l0.o", s * h, h * h, s * h, 0, 1};
    cc[2] = (cast_case){"l0.mlp.down", s * f, f * h, s * h, 0, 1};
}

/* op's price under recipe r; x is left at delayed scaling. */
static ap_op_cost price_recipe(ap_price_ctx *x, const char *op, ap_fp8_recipe r)
{
    x->run.fp8_recipe = r;
    ap_op_cost c = price(x, op);
    x->run.fp8_recipe = AP_FP8_DELAYED;
    return c;
}

/* Tensorwise (current) scaling reads a tensor for its amax before the
 * cast, 2 bytes an element, except where the kernel that made it found it:
 * the norm Transformer Engine fuses into QKV's linear layer. The
 * attention's output (the output projection's input), Megatron-Core's
 * SwiGLU output (fc2's), the weights and the output gradients take a pass
 * of their own. */
static void tensorwise_scaling_adds_an_amax_pass_where_no_kernel_finds_it(void)
{
    ap_graph *g = llama();
    one_gpu u;
    if (!g || one_gpu_init(&u, g, 1)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    cast_case cc[3];
    cast_cases(g, cc);
    for (int i = 0; i < 3; i++) {
        ap_op_cost d = price(&u.x, cc[i].op);
        ap_op_cost t = price_recipe(&u.x, cc[i].op, AP_FP8_TENSORWISE);
        double in = cc[i].in, w = cc[i].w, out = cc[i].out;
        /* Where the norm is fused, delayed scaling's norm writes FP8 and
         * leaves the transpose; tensorwise's writes bf16 and its amax, and
         * the cast follows. Elsewhere tensorwise adds the amax pass. */
        double in_extra = cc[i].fused ? cast(&u.c, in) - transpose(&u.c, in)
                                      : ap_cost_memop(&u.c, in, 2 * in);
        CHECK_NEAR(t.fwd - d.fwd, in_extra / cc[i].share + ap_cost_memop(&u.c, w, 2 * w) / 8,
                   1e-9);
        CHECK_NEAR(t.bwd - d.bwd, ap_cost_memop(&u.c, out, 2 * out), 1e-9);
    }
    ap_cluster_free(&u.c);
    ap_graph_free(g);
}

/* A block-scaled cast: the rowwise and columnwise copies, each with a
 * scale per 32 elements (1/32 of a byte an element). */
static double block_cast(const ap_cluster *c, double elems)
{
    return ap_cost_memop(c, elems, 4 * elems + elems / 16);
}

/* The block-scaled recipes (blockwise, mxfp8) find each block's scale in
 * the cast itself, so no tensor takes an amax pass, but TE's norm then
 * writes bf16 (its fused FP8 norm is delayed scaling's) and the fused
 * module's input is cast after it; every cast also writes its two copies'
 * scales. The two recipes price alike here: their kernels differ, not
 * their bytes. */
static void block_scaled_recipes_cast_with_their_scales_and_no_amax_pass(void)
{
    ap_graph *g = llama();
    one_gpu u;
    if (!g || one_gpu_init(&u, g, 1)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    cast_case cc[3];
    cast_cases(g, cc);
    for (int i = 0; i < 3; i++) {
        ap_op_cost d = price(&u.x, cc[i].op);
        ap_op_cost b = price_recipe(&u.x, cc[i].op, AP_FP8_BLOCKWISE);
        ap_op_cost m = price_recipe(&u.x, cc[i].op, AP_FP8_MXFP8);
        double in = cc[i].in, w = cc[i].w, out = cc[i].out;
        double in_was = cc[i].fused ? transpose(&u.c, in) : cast(&u.c, in);
        CHECK_NEAR(b.fwd - d.fwd, (block_cast(&u.c, in) - in_was) / cc[i].share +
                   (block_cast(&u.c, w) - cast(&u.c, w)) / 8, 1e-9);
        CHECK_NEAR(b.bwd - d.bwd, block_cast(&u.c, out) - cast(&u.c, out), 1e-9);
        CHECK(m.fwd == b.fwd && m.bwd == b.bwd);
    }
    ap_cluster_free(&u.c);
    ap_graph_free(g);
}

static void attention_and_the_head_are_unchanged_by_fp8(void)
{
    ap_graph *g = llama();
    one_gpu u;
    if (!g || one_gpu_init(&u, g, 1)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    const char *ops[] = {"l0.attn", "lm_head", "embed"};
    for (size_t i = 0; i < 3; i++) {
        u.x.run.fp8 = 1;
        ap_op_cost f = price(&u.x, ops[i]);
        u.x.run.fp8 = 0;
        ap_op_cost b = price(&u.x, ops[i]);
        CHECK(f.fwd > 0 && f.fwd == b.fwd && f.bwd == b.bwd);
        CHECK(f.act_bytes == b.act_bytes && f.param_bytes == b.param_bytes);
    }
    ap_cluster_free(&u.c);
    ap_graph_free(g);
}

static void a_linear_layer_saves_its_input_in_one_byte_and_keeps_fp8_weights(void)
{
    ap_graph *g = llama();
    one_gpu u;
    if (!g || one_gpu_init(&u, g, 0)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    ap_op_cost b = price(&u.x, "l0.mlp.down");
    u.x.run.fp8 = 1;
    ap_op_cost f = price(&u.x, "l0.mlp.down");
    /* down saves its [s, f] input: 2 bytes an element in bf16. */
    double sf = dim_of(g, AP_DIM_SEQ) * dim_of(g, AP_DIM_FFN);
    CHECK_NEAR(b.act_bytes, 2 * sf, 1e-12);
    CHECK_NEAR(f.act_bytes, sf, 1e-12);
    /* The FP8 weight and its transpose: 2 bytes per parameter beside the
     * 16 of mixed-precision Adam; not optimizer state. */
    double w = dim_of(g, AP_DIM_HIDDEN) * dim_of(g, AP_DIM_FFN);
    CHECK_NEAR(b.param_bytes, 16 * w, 1e-12);
    CHECK_NEAR(f.param_bytes, 18 * w, 1e-12);
    CHECK_NEAR(f.fp8_weight_bytes, 2 * w, 1e-12);
    ap_cluster_free(&u.c);
    ap_graph_free(g);
}

static void fp8_on_an_a100_is_refused_naming_fp8_and_the_gpu(void)
{
    ap_graph *g = llama();
    ap_cluster c;
    char err[AP_ERR_LEN] = "";
    if (!g || ap_cluster_preset("a100-80g", 8, 0, &c, err)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    ap_megatron m;
    ap_megatron_default(&m);
    m.gbs = 128;
    m.run.fp8 = 1;
    ap_plan p;
    CHECK(ap_megatron_plan(g, &c, &m, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "fp8");
    CHECK_STR_HAS(err, "a100-80g");
    CHECK_STR_HAS(err, "A100");
    /* The search refuses too, before it starts. */
    ap_plan_opts o;
    ap_plan_opts_default(&o);
    o.run.fp8 = 1;
    err[0] = 0;
    CHECK(ap_plan_search(g, &c, &o, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "no FP8 tensor cores");
    ap_cluster_free(&c);
    /* MXFP8 needs Blackwell's tensor cores (TE's check_mxfp8_support);
     * Hopper runs blockwise, and a B200 either. */
    const char *gpus[] = {"h100-sxm", "h200", "b200", "b200"};
    const ap_fp8_recipe rs[] = {AP_FP8_MXFP8, AP_FP8_MXFP8, AP_FP8_MXFP8, AP_FP8_BLOCKWISE};
    for (int i = 0; i < 4; i++) {
        if (ap_cluster_preset(gpus[i], 8, 0, &c, err)) {
            CHECK(0);
            continue;
        }
        err[0] = 0;
        int rc = ap_fp8_check(&c, rs[i], err);
        CHECK(rc == (i < 2 ? AP_EINPUT : AP_OK));
        if (i < 2)
            CHECK_STR_HAS(err, "Blackwell");
        CHECK(ap_fp8_check(&c, AP_FP8_BLOCKWISE, err) == AP_OK);
        ap_cluster_free(&c);
    }
    ap_graph_free(g);
}

static void megatron_fp8_flags_parse_to_fp8_on(void)
{
    char err[AP_ERR_LEN];
    ap_megatron m;
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--fp8-format hybrid --fp8-amax-history-len 1024 "
                                      "--fp8-amax-compute-algo max --fp8-margin 0 "
                                      "--tensor-model-parallel-size 2", &m, err), err);
    CHECK(m.run.fp8 == 1);
    CHECK(m.tp == 2); /* the tuning flags' values were read past, not lost */
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--fp8-format e4m3", &m, err), err);
    CHECK(m.run.fp8 == 1);
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse_args("--tensor-model-parallel-size 2 --bf16", &m, err), err);
    CHECK(m.run.fp8 == 0);
    CHECK(ap_megatron_parse_args("--fp8-format e5m2", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--fp8-format");
    CHECK(ap_megatron_parse_args("--fp8-margin", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "needs a value");
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse("tp=2,fp8=1", &m, err), err);
    CHECK(m.run.fp8 == 1);
    CHECK(ap_megatron_parse("fp8=2", &m, err) == AP_EINPUT);
    char spec[256];
    ap_megatron_format(&m, spec, sizeof spec);
    CHECK_STR_HAS(spec, ",fp8=1");
}

static int estimate(const ap_graph *g, const ap_cluster *c, int fp8, ap_plan *p)
{
    char err[AP_ERR_LEN];
    ap_megatron m;
    ap_megatron_default(&m);
    m.gbs = 128;
    m.run.fp8 = fp8;
    int rc = ap_megatron_plan(g, c, &m, p, err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    return rc;
}

/* The step's GEMM time in bf16: every linear op of a layer under the
 * plan's layout, times the layers and micro-batches. */
static double linear_time(const ap_graph *g, const ap_cluster *c, const ap_plan *p)
{
    const ap_stage *st = &p->stages[0];
    ap_price_ctx x = {.g = g, .c = c, .mesh = &st->mesh, .batch = p->micro_batch,
                      .nmicro = p->nmicro, .zero = p->zero};
    const ap_block *blk = &st->blocks[2];
    const ap_block_point *bp = &blk->points[st->point[2]];
    double t = 0;
    for (int i = 0; i < blk->nops; i++) {
        if (!ap_fp8_linear(g, blk->ops[i]))
            continue;
        ap_op_cost oc;
        ap_price_op(&x, blk->ops[i], &bp->strat[i], &oc);
        t += oc.fwd + oc.bwd;
    }
    return t * g->nlayers * p->nmicro;
}

static void llama_2_7b_on_8_h100_gains_less_than_its_gemms_could(void)
{
    ap_graph *g = llama();
    ap_cluster c;
    char err[AP_ERR_LEN];
    if (!g || ap_cluster_preset("h100-sxm", 8, 0, &c, err)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    ap_plan b, f;
    if (estimate(g, &c, 0, &b) == 0) {
        if (estimate(g, &c, 1, &f) == 0) {
            double gemm = linear_time(g, &c, &b);
            CHECK(gemm > 0.5 * b.step_time); /* a GEMM-bound step */
            CHECK(f.step_time < b.step_time);
            /* At twice the peak the GEMMs at most halve, and the casts
             * take some of that back. */
            CHECK(b.step_time - f.step_time < gemm / 2);
            CHECK(b.step_time - f.step_time > gemm / 4);
            ap_plan_free(&f);
        } else {
            CHECK(0);
        }
        ap_plan_free(&b);
    } else {
        CHECK(0);
    }
    ap_cluster_free(&c);
    ap_graph_free(g);
}

static void plan_json_carries_fp8_only_when_on_and_reads_it_back(void)
{
    ap_graph *g = llama();
    ap_cluster c;
    char err[AP_ERR_LEN];
    if (!g || ap_cluster_preset("h100-sxm", 8, 0, &c, err)) {
        CHECK(0);
        ap_graph_free(g);
        return;
    }
    for (int fp8 = 0; fp8 < 2; fp8++) {
        ap_plan p;
        if (estimate(g, &c, fp8, &p)) {
            CHECK(0);
            continue;
        }
        char *text = ap_plan_to_json(g, &p);
        cJSON *root = cJSON_Parse(text);
        const cJSON *flag = cJSON_GetObjectItemCaseSensitive(root, "fp8");
        CHECK(fp8 ? cJSON_IsTrue(flag) : flag == NULL);
        ap_plan_desc d;
        if (ap_plan_desc_parse(text, strlen(text), "plan.json", &d, err) == 0) {
            CHECK(d.run.fp8 == fp8);
            ap_plan_desc_free(&d);
        } else {
            CHECK(0);
        }
        /* Anything but a boolean is refused, naming the field. */
        char *at = fp8 ? strstr(text, "\"fp8\":\ttrue") : NULL;
        if (at) {
            memcpy(at + 7, "1   ", 4);
            CHECK(ap_plan_desc_parse(text, strlen(text), "plan.json", &d, err) == AP_EINPUT);
            CHECK_STR_HAS(err, "fp8");
        }
        CHECK(fp8 == 0 || at != NULL);
        cJSON_Delete(root);
        free(text);
        ap_plan_free(&p);
    }
    ap_cluster_free(&c);
    ap_graph_free(g);
}

int main(void)
{
    RUN(only_the_layers_linear_layers_run_in_fp8);
    RUN(a_linear_layer_takes_the_fp8_gemm_time_plus_its_casts);
    RUN(tensorwise_scaling_adds_an_amax_pass_where_no_kernel_finds_it);
    RUN(block_scaled_recipes_cast_with_their_scales_and_no_amax_pass);
    RUN(attention_and_the_head_are_unchanged_by_fp8);
    RUN(a_linear_layer_saves_its_input_in_one_byte_and_keeps_fp8_weights);
    RUN(fp8_on_an_a100_is_refused_naming_fp8_and_the_gpu);
    RUN(megatron_fp8_flags_parse_to_fp8_on);
    RUN(llama_2_7b_on_8_h100_gains_less_than_its_gemms_could);
    RUN(plan_json_carries_fp8_only_when_on_and_reads_it_back);
    return DONE();
}
