/* test_hf_granite.c -- Granite 3 (Hugging Face model_type "granite",
 * GraniteForCausalLM: IBM's Granite 3.0, 3.1 and 3.3 dense models): Llama's
 * block with four muP multipliers, of which the embedding multiplier and
 * the logits' scaling are elementwise passes of their own and the residual
 * and attention multipliers cost nothing. The published 8B's parameters
 * against the closed form and the checkpoints' counts; the passes built;
 * GraniteConfig's defaults; the configs that are refused. */
#include <stdlib.h>

#include "model.h"

/* Per layer of the 8B: Q and O (4096 x 4096 each), K and V (4096 x 8 x 128
 * each), the SwiGLU MLP (3 x 4096 x 12800) and two RMSNorms: 199,237,632. */
static const double layer = 2.0 * 4096 * 4096 + 2.0 * 4096 * 1024 + 3.0 * 4096 * 12800 +
                            2 * 4096;

/* Granite-3.3-8B-Instruct (examples/hf/granite-3.3-8b-instruct.json): 40
 * layers, the one tied table (49,159 x 4,096) and the final norm:
 * 8,170,864,640, the count stored manifests of the Hub's checkpoints list
 * for ibm-granite/granite-3.3-8b-instruct (bf16, no lm_head.weight: the
 * head reads the embedding). */
static void granite_3_3_8b_has_the_checkpoints_8_17b_parameters(void)
{
    ap_graph *g = ap_test_model("examples/hf/granite-3.3-8b-instruct.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/granite-3.3-8b-instruct.json did not load");
    CHECK(layer == 199237632.0);
    CHECK(g->total_params == 40 * layer + 49159.0 * 4096 + 4096);
    CHECK(g->total_params == 8170864640.0);
    CHECK(ap_graph_find_tensor(g, "lm_head.w") < 0);
    ap_graph_free(g);
}

/* Granite 3.1's 8B is the same model with a vocabulary of 49,155:
 * 8,170,848,256, the safetensors metadata's count for
 * ibm-granite/granite-3.1-8b-instruct (16,341,738,616 bytes with the
 * header), four rows of 4,096 fewer than 3.3's. */
static void granite_3_1_8b_has_the_checkpoints_8_170_848_256_parameters(void)
{
    char path[512], err[AP_ERR_LEN];
    snprintf(path, sizeof path, "%s/examples/hf/granite-3.3-8b-instruct.json", ap_test_src());
    FILE *f = fopen(path, "rb");
    REQUIRE_OK(f ? 0 : 1, path);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char *v = strstr(text, "\"vocab_size\": 49159");
    REQUIRE_OK(v ? 0 : 1, "the example has no vocab_size 49159");
    memcpy(v + strlen("\"vocab_size\": 4915"), "5", 1);
    ap_graph *g = ap_test_hf_seq(text, 0, err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(g->total_params == 8170848256.0);
    CHECK(g->total_params == 40 * layer + 49155.0 * 4096 + 4096);
    ap_graph_free(g);
}

/* The embedding multiplier is a pass over the embeddings before the first
 * layer, and logits_scaling one over the logits before the loss; the
 * residual multiplier adds no op (each residual add reads the sublayer's
 * output as projected), nor does the attention multiplier. */
static void the_embeddings_and_the_logits_are_scaled_and_the_residuals_are_not(void)
{
    ap_graph *g = ap_test_model("examples/hf/granite-3.3-8b-instruct.json", 0);
    REQUIRE_OK(g ? 0 : 1, "examples/hf/granite-3.3-8b-instruct.json did not load");
    const ap_op *es = ap_test_op(g, "embed_scale"), *ls = ap_test_op(g, "logit_scale");
    const ap_op *ln1 = ap_test_op(g, "l0.ln1"), *res1 = ap_test_op(g, "l0.res1");
    const ap_op *loss = ap_test_op(g, "loss");
    REQUIRE_OK(es && ls && ln1 && res1 && loss ? 0 : 1, "an op is missing");
    CHECK(es->sub == AP_UNARY_SCALE && ls->sub == AP_UNARY_SCALE);
    CHECK(ln1->inputs[0] == es->outputs[0]);
    CHECK(ls->inputs[0] == ap_graph_find_tensor(g, "lm_head.y"));
    CHECK(loss->inputs[0] == ls->outputs[0]);
    CHECK(res1->inputs[1] == ap_graph_find_tensor(g, "l0.o.y"));
    int scales = 0;
    for (int i = 0; i < g->nops; i++)
        scales += g->ops[i].kind == AP_OP_UNARY && g->ops[i].sub == AP_UNARY_SCALE;
    CHECK(scales == 2);
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.rmsnorm && s.swiglu && s.tied_embeddings && !s.qkv_bias && !s.other_bias);
    CHECK(s.rotary_percent == 1 && !s.parallel_residual && !s.post_norm);
    ap_graph_free(g);
}

/* A small Granite of 2 layers; `extra` adds fields. */
static ap_graph *small_granite(const char *extra, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"granite\",\"hidden_size\":256,\"intermediate_size\":512,"
             "\"max_position_embeddings\":1024,\"num_attention_heads\":4,"
             "\"num_hidden_layers\":2,\"vocab_size\":1000%s}",
             extra);
    return ap_test_hf_seq(cfg, 0, err);
}

/* GraniteConfig's defaults: as many key-value heads as query heads, an
 * untied head, no biases; attention_bias puts one on Q, K, V and O, and
 * mlp_bias on the three MLP projections. */
static void granite_config_defaults_and_biases(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = small_granite("", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(ap_graph_dim(g, 'g')->size == 4 && ap_graph_find_tensor(g, "lm_head.w") >= 0);
    double plain = g->total_params;
    ap_graph_free(g);
    g = small_granite(",\"attention_bias\":true", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(g->total_params - plain == 2 * 4.0 * 256);
    CHECK(ap_test_op(g, "l1.o")->ninputs == 3 && ap_test_op(g, "l1.mlp.up")->ninputs == 2);
    ap_graph_free(g);
    g = small_granite(",\"mlp_bias\":true", err);
    REQUIRE_OK(g ? 0 : 1, err);
    CHECK(g->total_params - plain == 2 * (2 * 512.0 + 256));
    ap_graph_free(g);
}

static void refused(const char *extra, const char *needle)
{
    char err[AP_ERR_LEN] = "";
    ap_graph *g = small_granite(extra, err);
    CHECK(g == NULL);
    CHECK_STR_HAS(err, needle);
    ap_graph_free(g);
}

/* A multiplier that is not a number above 0, another activation than
 * GraniteMLP's SiLU, or heads that do not tile are refused, naming the
 * file and the field. */
static void what_is_not_built_is_refused(void)
{
    refused(",\"logits_scaling\":\"16\"", "config.json: \"logits_scaling\" must be a number, "
            "not a string");
    refused(",\"residual_multiplier\":0", "config.json: \"residual_multiplier\" is 0; it must "
            "be above 0");
    refused(",\"embedding_multiplier\":-12", "\"embedding_multiplier\" is -12; it must be "
            "above 0");
    refused(",\"hidden_act\":\"gelu\"", "\"hidden_act\" is \"gelu\"; granite is built with "
            "\"silu\"");
    refused(",\"num_key_value_heads\":3", "\"num_attention_heads\" (4) is not a multiple of "
            "\"num_key_value_heads\" (3)");
}

int main(void)
{
    RUN(granite_3_3_8b_has_the_checkpoints_8_17b_parameters);
    RUN(granite_3_1_8b_has_the_checkpoints_8_170_848_256_parameters);
    RUN(the_embeddings_and_the_logits_are_scaled_and_the_residuals_are_not);
    RUN(granite_config_defaults_and_biases);
    RUN(what_is_not_built_is_refused);
    return DONE();
}
