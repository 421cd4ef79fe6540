/* test_hf_ernie.c -- ERNIE 4.5 (Hugging Face model_types "ernie4_5",
 * Ernie4_5ForCausalLM: ERNIE-4.5-0.3B; and "ernie4_5_moe",
 * Ernie4_5_MoeForCausalLM: ERNIE-4.5-21B-A3B and 300B-A47B): Llama's block
 * with use_bias on every projection, heads of head_dim, tied tables by
 * default, and for the MoE models a softmax router whose picks a
 * correction bias moves, renormalised and unscaled, with shared experts,
 * on the layers from moe_layer_start_index to moe_layer_end_index every
 * moe_layer_interval-th. Each published size's parameters, total and
 * active, against the closed form and the published counts; the blocks
 * the modeling files run; the router; the configs that are refused; and
 * Megatron-LM's refusal of the router. */
#include <stdlib.h>

#include "model.h"

/* ERNIE-4.5-0.3B (examples/hf/ernie-4.5-0.3b.json): 18 layers of Q and O
 * (1024 x 16 x 128 each), K and V (1024 x 2 x 128 each), the SwiGLU MLP
 * (3 x 1024 x 3072) and two norms, 14,157,824 each; the tied table
 * (103,424 x 1,024) and the final norm: 360,748,032, the "0.36B" of the
 * model card. Its heads are 128 wide (16 x 128 = 2,048, twice the hidden
 * size), head_dim as the config states it and Ernie4_5Config defaults it;
 * hidden / heads would give 64 and 318,280,704. */
static void ernie_0_3b_has_0_36b_parameters(void)
{
    ap_graph *g = ap_test_model("examples/hf/ernie-4.5-0.3b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/ernie-4.5-0.3b.json did not load");
    double h = 1024, layer = 2 * h * 2048 + 2 * h * 256 + 3 * h * 3072 + 2 * h;
    CHECK(layer == 14157824.0);
    CHECK(g->total_params == 18 * layer + 103424 * h + h);
    CHECK(g->total_params == 360748032.0);
    CHECK(ap_graph_dim(g, 'd')->size == 128 && ap_graph_find_tensor(g, "lm_head.w") < 0);
    CHECK(ap_test_op(g, "l0.q")->ninputs == 2 && ap_test_op(g, "l0.mlp.up")->ninputs == 2);
    ap_graph_free(g);
}

typedef struct {
    double h, layers, dense, ffn, q, kv, E, moe, shared, vocab;
    int tied;
} ernie_size;

/* The whole MoE model with `routed` experts of each MoE layer counted (E
 * for the total, top k for the active count): attention (Q and O of q
 * wide, K and V of kv), two norms a layer, the dense layers' SwiGLU, the
 * MoE layers' router (h x E), experts and shared expert (3 x h x moe
 * each, 3 x h x shared), the tables and the final norm. */
static double model_params(const ernie_size *s, double routed)
{
    double attn = 2 * s->h * s->q + 2 * s->h * s->kv + 2 * s->h;
    double moe = s->h * s->E + routed * 3 * s->h * s->moe + 3 * s->h * s->shared;
    return s->dense * (attn + 3 * s->h * s->ffn) + (s->layers - s->dense) * (attn + moe) +
           (s->tied ? 1 : 2) * s->vocab * s->h + s->h;
}

static const ernie_size a3b = {2560, 28, 1, 12288, 20 * 128, 4 * 128, 64, 1536, 3072, 103424, 1};

/* ERNIE-4.5-21B-A3B (examples/hf/ernie-4.5-21b-a3b.json): one dense layer
 * of 110,105,600 and 27 MoE layers of 794,465,280 (64 experts of 1,536
 * and two shared, 3,072 wide), the tied table: 21,825,436,160, the
 * published "21B" (21.8B). Active, 6 experts of 64: 110,269,440 a MoE
 * layer, 3,352,148,480 with the table counted whole as
 * ap_graph_active_params counts it and 3,087,383,040 without it, the
 * published "A3B". */
static void ernie_21b_a3b_has_21_8b_parameters_3_1b_active_without_the_table(void)
{
    ap_graph *g = ap_test_model("examples/hf/ernie-4.5-21b-a3b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/ernie-4.5-21b-a3b.json did not load");
    CHECK(g->total_params == model_params(&a3b, 64));
    CHECK(g->total_params == 21825436160.0);
    double active = ap_graph_active_params(g);
    CHECK(active == model_params(&a3b, 6));
    CHECK(active == 3352148480.0);
    CHECK(active - 103424.0 * 2560 == 3087383040.0);
    ap_graph_free(g);
}

/* ERNIE-4.5-300B-A47B's fields as MindIE's tests transcribe them: 54
 * layers, the first three dense (moe_layer_start_index 3), 64 experts of
 * 3,584 (top 8) and no shared expert, the table tied as that copy says. */
static const char *a47b =
    "{\"model_type\":\"ernie4_5_moe\",\"hidden_act\":\"silu\",\"hidden_size\":8192,"
    "\"intermediate_size\":28672,\"max_position_embeddings\":131072,"
    "\"num_attention_heads\":64,\"num_key_value_heads\":8,\"num_hidden_layers\":54,"
    "\"pad_token_id\":0,\"bos_token_id\":1,\"eos_token_id\":2,\"rms_norm_eps\":1e-05,"
    "\"use_cache\":false,\"vocab_size\":103424,\"rope_theta\":500000.0,"
    "\"moe_num_experts\":64,\"moe_num_shared_experts\":0,\"moe_layer_start_index\":3,"
    "\"moe_layer_end_index\":53,\"moe_intermediate_size\":3584,\"moe_gate\":\"topk_fused\","
    "\"moe_k\":8,\"moe_layer_interval\":1,\"tie_word_embeddings\":true}";

static const ernie_size a47b_size = {8192, 54, 3, 28672, 64 * 128, 8 * 128, 64, 3584, 0,
                                     103424, 1};

/* Three dense layers of 855,654,400 and 51 MoE layers of 5,788,680,192:
 * 298,636,910,592 with the table tied (299,484,160,000 untied), the
 * published "300B". Active, 8 experts of 64: 47,079,333,888, and
 * 46,232,084,480 without the table, the published "A47B". */
static void ernie_300b_a47b_has_298_6b_parameters_and_47b_active(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = ap_test_hf_seq(a47b, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(g->total_params == model_params(&a47b_size, 64));
    CHECK(g->total_params == 298636910592.0);
    double active = ap_graph_active_params(g);
    CHECK(active == model_params(&a47b_size, 8));
    CHECK(active == 47079333888.0);
    CHECK(active - 103424.0 * 8192 == 46232084480.0);
    CHECK(ap_test_op(g, "l2.router") == NULL && ap_test_op(g, "l3.router") != NULL);
    CHECK(ap_test_op(g, "l53.router") != NULL && ap_graph_dim(g, 'S') == NULL);
    ap_graph_free(g);
}

/* Ernie4_5_MoeSparseMoeBlock's router: a softmax over all experts, the
 * correction bias (moe_statics) added to pick, the picked probabilities
 * renormalised and not scaled; no groups. Layer 0 is dense, every later
 * one routes to 6 of 64 experts beside the shared expert. */
static void the_router_is_a_softmax_with_a_correction_bias_renormalised_unscaled(void)
{
    ap_graph *g = ap_test_model("examples/hf/ernie-4.5-21b-a3b.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/ernie-4.5-21b-a3b.json did not load");
    CHECK(ap_test_op(g, "l0.router") == NULL && ap_test_op(g, "l0.mlp.gate") != NULL);
    const ap_op *r = ap_test_op(g, "l27.router");
    CHECK(r && r->top_k == 6 && r->groups == 0 && r->ninputs == 2);
    CHECK(r && r->route_score == AP_ROUTE_SOFTMAX && r->route_bias && r->route_norm);
    CHECK(r && r->route_scale == 1 && !r->route_on_input);
    CHECK(ap_graph_dim(g, 'S')->size == 3072 && ap_test_op(g, "l1.shared.gate") != NULL);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(!s.route_sigmoid && !s.route_unnormalized && s.route_bias && s.tied_embeddings);
    CHECK(!s.qkv_bias && !s.other_bias && s.shared_ffn == 3072);
    ap_graph_free(g);
}

/* A small ERNIE 4.5 MoE of 6 layers; `extra` adds fields. */
static ap_graph *small_moe(const char *extra, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"ernie4_5_moe\",\"hidden_size\":256,\"intermediate_size\":512,"
             "\"max_position_embeddings\":512,\"moe_intermediate_size\":128,"
             "\"moe_k\":2,\"moe_num_experts\":8,\"num_attention_heads\":4,"
             "\"num_hidden_layers\":6,\"vocab_size\":1000%s}",
             extra);
    return ap_test_hf_seq(cfg, 0, err);
}

static int routes(const ap_graph *g, int layer)
{
    char name[32];
    snprintf(name, sizeof name, "l%d.router", layer);
    return ap_test_op(g, name) != NULL;
}

/* Layer i routes where (i + 1) % moe_layer_interval is 0 and it lies from
 * moe_layer_start_index to moe_layer_end_index, -1 the last layer:
 * Ernie4_5_MoeConfig's defaults route every layer from the second, with
 * two shared experts, 4 key-value heads and the table tied. */
static void the_moe_layers_are_those_from_start_to_end_every_interval(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_moe("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(!routes(g, 0) && routes(g, 1) && routes(g, 5));
    CHECK(ap_graph_dim(g, 'S')->size == 256 && ap_graph_dim(g, 'g')->size == 4);
    CHECK(ap_graph_dim(g, 'd')->size == 64 && ap_graph_find_tensor(g, "lm_head.w") < 0);
    ap_graph_free(g);
    g = small_moe(",\"moe_layer_start_index\":0,\"moe_layer_end_index\":4,"
                  "\"moe_layer_interval\":2,\"moe_num_shared_experts\":0",
                  err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(!routes(g, 0) && routes(g, 1) && !routes(g, 2) && routes(g, 3));
    CHECK(!routes(g, 4) && !routes(g, 5) && ap_graph_dim(g, 'S') == NULL);
    ap_graph_free(g);
}

/* use_bias puts a bias on Q, K, V and O, on every MLP (the dense layers',
 * the experts' and the shared expert's) and, in Ernie4_5_MoeForCausalLM,
 * on the output layer; never on the router. Ernie4_5ForCausalLM's head has
 * none. */
static void use_bias_covers_every_projection_and_the_moe_head(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_moe("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    double base = g->total_params;
    ap_graph_free(g);
    g = small_moe(",\"use_bias\":true", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_op(g, "l0.q")->ninputs == 3 && ap_test_op(g, "l0.o")->ninputs == 3);
    CHECK(ap_test_op(g, "l0.mlp.down")->ninputs == 3 && ap_test_op(g, "l1.router")->ninputs == 2);
    CHECK(ap_test_op(g, "l1.experts.gate")->ninputs == 3);
    CHECK(ap_test_op(g, "l1.shared.down")->ninputs == 3 && ap_test_op(g, "lm_head")->ninputs == 3);
    /* Per layer q, k, v and o (256 each: 4 heads and 4 key-value heads of
     * 64); the dense MLP (2 x 512 + 256); the experts (8 x (2 x 128 +
     * 256)), the shared expert (2 x 256 + 256); the head (1000). */
    double attn = 4 * 256;
    CHECK(g->total_params - base ==
          6 * attn + (2 * 512 + 256) + 5 * (8 * (2 * 128 + 256) + (2 * 256 + 256)) + 1000);
    ap_graph_free(g);
    const char *dense = "{\"model_type\":\"ernie4_5\",\"hidden_size\":256,\"intermediate_size\":"
                        "512,\"max_position_embeddings\":512,\"num_attention_heads\":4,"
                        "\"num_hidden_layers\":2,\"vocab_size\":1000,\"use_bias\":true}";
    g = ap_test_hf_seq(dense, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_op(g, "l1.o")->ninputs == 3 && ap_test_op(g, "lm_head")->ninputs == 2);
    /* Ernie4_5Config's heads of 128 and 2 key-value heads, left out. */
    CHECK(ap_graph_dim(g, 'd')->size == 128 && ap_graph_dim(g, 'g')->size == 2);
    ap_graph_free(g);
}

static void refused(const char *extra, const char *needle)
{
    char err[AP_ERR_LEN] = "";
    ap_graph *g = small_moe(extra, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

/* Each message names the file and the field. */
static void what_is_not_built_is_refused(void)
{
    refused(",\"moe_layer_end_index\":-2", "config.json: \"moe_layer_end_index\" is -2; it must "
            "be between -1 and");
    refused(",\"moe_layer_interval\":0", "\"moe_layer_interval\" is 0; it must be between 1");
    refused(",\"hidden_act\":\"gelu\"", "\"hidden_act\" is \"gelu\"; ernie4_5_moe is built with "
            "\"silu\"");
    refused(",\"use_bias\":1", "\"use_bias\" must be true or false, not a number");
    char err[AP_ERR_LEN] = "";
    const char *none = "{\"model_type\":\"ernie4_5_moe\",\"hidden_size\":256,"
                       "\"intermediate_size\":512,\"moe_intermediate_size\":128,\"moe_k\":2,"
                       "\"num_attention_heads\":4,\"num_hidden_layers\":2,\"vocab_size\":1000}";
    ap_graph *g = ap_test_hf_seq(none, 512, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, "config.json: \"moe_num_experts\" is missing");
    ap_graph_free(g);
    const char *over = "{\"model_type\":\"ernie4_5_moe\",\"hidden_size\":256,"
                       "\"intermediate_size\":512,\"moe_intermediate_size\":128,\"moe_k\":9,"
                       "\"moe_num_experts\":8,\"num_attention_heads\":4,"
                       "\"num_hidden_layers\":2,\"vocab_size\":1000}";
    g = ap_test_hf_seq(over, 512, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, "config.json: \"moe_k\" (9) exceeds \"moe_num_experts\" (8)");
    ap_graph_free(g);
}

/* Megatron-Core's expert bias goes with sigmoid scores only: the export
 * refuses a softmax router with one and says why. */
static void megatron_export_refuses_the_softmax_router_with_a_bias(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_moe("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    ap_plan_desc d;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=8,sp=0", &d, NULL),
               "see above");
    char *out = NULL;
    CHECK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &out, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "goes with sigmoid scores only");
    free(out);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

int main(void)
{
    RUN(ernie_0_3b_has_0_36b_parameters);
    RUN(ernie_21b_a3b_has_21_8b_parameters_3_1b_active_without_the_table);
    RUN(ernie_300b_a47b_has_298_6b_parameters_and_47b_active);
    RUN(the_router_is_a_softmax_with_a_correction_bias_renormalised_unscaled);
    RUN(the_moe_layers_are_those_from_start_to_end_every_interval);
    RUN(use_bias_covers_every_projection_and_the_moe_head);
    RUN(what_is_not_built_is_refused);
    RUN(megatron_export_refuses_the_softmax_router_with_a_bias);
    return DONE();
}
