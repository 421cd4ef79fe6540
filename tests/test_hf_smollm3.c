/* test_hf_smollm3.c -- SmolLM3 (Hugging Face model_type "smollm3",
 * SmolLM3ForCausalLM: SmolLM3-3B and its base): Llama's block, whose every
 * fourth layer takes no rotary embedding (NoPE: no_rope_layers, 1 where a
 * layer rotates, else SmolLM3Config's rule from no_rope_layer_interval),
 * tied tables by default, and a sliding window only on the NoPE layers
 * under use_sliding_window. The published size's parameters against the
 * closed form and the checkpoint's count; the layers with and without
 * rotary; the window; the configs that are refused. */
#include <stdlib.h>

#include "model.h"

/* Per layer: Q and O (2048 x 16 x 128 each), K and V (2048 x 4 x 128
 * each), the SwiGLU MLP (3 x 2048 x 11008) and two RMSNorms: 78,123,008,
 * with or without rotary (it has no parameters). */
static const double layer = 2.0 * 2048 * 2048 + 2.0 * 2048 * 512 + 3.0 * 2048 * 11008 +
                            2 * 2048;

/* SmolLM3-3B-Base (examples/hf/smollm3-3b-base.json): 36 layers, the one
 * tied table (128,256 x 2,048) and the final norm: 3,075,098,624
 * parameters. SmolLM3-3B's model.safetensors.index.json says the same,
 * total_parameters 3,075,098,624 and total_size 6,150,197,248 bytes (two a
 * parameter, bf16, no lm_head.weight: the head reads the embedding). */
static void smollm3_3b_has_the_checkpoints_3_075b_parameters(void)
{
    ap_graph *g = ap_test_model("examples/hf/smollm3-3b-base.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/smollm3-3b-base.json did not load");
    CHECK(layer == 78123008.0);
    CHECK(g->total_params == 36 * layer + 128256.0 * 2048 + 2048);
    CHECK(g->total_params == 3075098624.0);
    CHECK(2 * g->total_params == 6150197248.0);
    CHECK(ap_graph_find_tensor(g, "lm_head.w") < 0);
    ap_graph_free(g);
}

/* The published configs' pattern, three rotary layers then a NoPE one:
 * layers 3, 7, ..., 35 have no q_rot or k_rot (attention reads q and k as
 * projected) and no q or k norm; the others rotate the whole head. */
static void every_fourth_layer_takes_no_rotary(void)
{
    ap_graph *g = ap_test_model("examples/hf/smollm3-3b-base.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/smollm3-3b-base.json did not load");
    int nope = 0;
    for (int i = 0; i < 36; i++) {
        char name[32];
        snprintf(name, sizeof name, "l%d.q_rot", i);
        int rotates = ap_test_op(g, name) != NULL;
        CHECK(rotates == ((i + 1) % 4 != 0));
        nope += !rotates;
    }
    CHECK(nope == 9);
    const ap_op *attn = ap_test_op(g, "l3.attn");
    CHECK(attn && attn->inputs[0] == ap_graph_find_tensor(g, "l3.q.y"));
    CHECK(attn && attn->chunk == 0 && attn->window == 0);
    CHECK(ap_test_op(g, "l0.q_norm") == NULL && ap_test_op(g, "l3.q_norm") == NULL);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.nope_layers == 9 && !strcmp(s.nope_freq, "4") && !s.qk_l2 && s.chunk == 0);
    CHECK(s.tied_embeddings && !s.qkv_bias && !s.other_bias && s.rotary_percent == 1);
    ap_graph_free(g);
}

/* A small SmolLM3 of 8 layers; `extra` adds fields. */
static ap_graph *small_smol(const char *extra, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"smollm3\",\"hidden_size\":256,\"intermediate_size\":512,"
             "\"max_position_embeddings\":1024,\"num_attention_heads\":4,"
             "\"num_hidden_layers\":8,\"vocab_size\":1000%s}",
             extra);
    return ap_test_hf_seq(cfg, 0, err);
}

static int rotates(const ap_graph *g, int layer)
{
    char name[32];
    snprintf(name, sizeof name, "l%d.q_rot", layer);
    return ap_test_op(g, name) != NULL;
}

/* no_rope_layers says which layers rotate (1) and which do not (0); SmolLM3
 * reads entry i for layer i, so a longer list is read to the last layer.
 * Without it, no_rope_layer_interval (4) places them. */
static void no_rope_layers_or_the_interval_place_the_nope_layers(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_smol(",\"no_rope_layers\":[0,1,1,1,1,1,1,0,1,1]", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(!rotates(g, 0) && rotates(g, 1) && rotates(g, 3) && !rotates(g, 7));
    ap_graph_free(g);
    g = small_smol(",\"no_rope_layer_interval\":2", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(rotates(g, 0) && !rotates(g, 1) && rotates(g, 2) && !rotates(g, 7));
    ap_graph_free(g);
    /* SmolLM3Config's 4 key-value heads and tied tables where left out. */
    g = small_smol("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(!rotates(g, 3) && rotates(g, 4) && ap_graph_dim(g, 'g')->size == 4);
    double tied = g->total_params;
    ap_graph_free(g);
    g = small_smol(",\"tie_word_embeddings\":false", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(g->total_params - tied == 1000.0 * 256);
    ap_graph_free(g);
}

/* SmolLM3Attention has a window only under use_sliding_window, on the
 * layers layer_types calls sliding, which SmolLM3Config's rule makes the
 * NoPE layers; without use_sliding_window there is none. */
static void the_window_is_on_the_nope_layers_under_use_sliding_window(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_smol(",\"use_sliding_window\":true,\"sliding_window\":256", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_window(g, 3) == 256 && ap_test_window(g, 7) == 256);
    CHECK(ap_test_window(g, 0) == 0 && ap_test_window(g, 4) == 0);
    ap_graph_free(g);
    g = small_smol(",\"sliding_window\":256", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_window(g, 3) == 0);
    ap_graph_free(g);
    g = small_smol(",\"use_sliding_window\":true,\"sliding_window\":256,\"layer_types\":"
                   "[\"sliding_attention\",\"full_attention\",\"full_attention\",\"full_attention\","
                   "\"full_attention\",\"full_attention\",\"full_attention\",\"full_attention\"]",
                   err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_test_window(g, 0) == 256 && ap_test_window(g, 3) == 0);
    ap_graph_free(g);
}

static void refused(const char *extra, const char *needle)
{
    char err[AP_ERR_LEN] = "";
    ap_graph *g = small_smol(extra, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

/* A list with fewer entries than layers, an entry other than 0 or 1, or
 * another activation than SmolLM3MLP's SiLU are refused, naming the file
 * and the field. */
static void what_is_not_built_is_refused(void)
{
    refused(",\"no_rope_layers\":[1,1,1,0]", "config.json: \"no_rope_layers\" must be an array "
            "of at least 8 0s and 1s, one per layer");
    refused(",\"no_rope_layers\":[1,1,1,2,1,1,1,0]", "config.json: \"no_rope_layers\"[3] must "
            "be 0 (no rotary) or 1");
    refused(",\"no_rope_layer_interval\":0", "\"no_rope_layer_interval\" is 0; it must be "
            "between 1 and");
    refused(",\"hidden_act\":\"relu\"", "\"hidden_act\" is \"relu\"; smollm3 is built with "
            "\"silu\"");
    refused(",\"partial_rotary_factor\":0.3", "\"partial_rotary_factor\" (0.3) of the head size "
            "64 rotates an odd number of elements (19)");
}

int main(void)
{
    RUN(smollm3_3b_has_the_checkpoints_3_075b_parameters);
    RUN(every_fourth_layer_takes_no_rotary);
    RUN(no_rope_layers_or_the_interval_place_the_nope_layers);
    RUN(the_window_is_on_the_nope_layers_under_use_sliding_window);
    RUN(what_is_not_built_is_refused);
    return DONE();
}
