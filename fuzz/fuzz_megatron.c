/* fuzz_megatron.c -- libFuzzer harness for the Megatron-LM configuration
 * parsers: ap_megatron_parse ("tp=8,pp=4,...") when the first byte is even,
 * ap_megatron_parse_args (the real flags) when it is odd. A configuration
 * that parses is then checked and priced against a small Llama-style model
 * on 8 GPUs, which reaches the arithmetic on the parsed sizes. The same text
 * is read as a --moe-layer-freq value too (ap_moe_freq_parse), whose
 * expression reader the dense model never reaches. Flags that state a model
 * (ap_megatron_states_model) are built into one (ap_megatron_model,
 * ap_graph_from_decoder), as `autopar estimate` without MODEL does. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "planner/planner.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char tiny_llama[] =
    "{\"model_type\": \"llama\", \"num_hidden_layers\": 4, \"hidden_size\": 64,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"intermediate_size\": 128, \"vocab_size\": 256,"
    " \"max_position_embeddings\": 64}";

static ap_graph *model(void)
{
    static ap_graph *g;
    char err[AP_ERR_LEN];
    if (!g && ap_graph_from_hf(tiny_llama, sizeof tiny_llama - 1, "tiny",
                               NULL, &g, err))
        abort();
    return g;
}

static void price(const ap_megatron *m)
{
    char err[AP_ERR_LEN];
    ap_cluster c;
    ap_plan p;
    if (ap_cluster_preset("h100-sxm", 8, 8, &c, err))
        abort();
    err[0] = 0;
    int rc = ap_megatron_plan(model(), &c, m, &p, err);
    if (rc == AP_OK)
        ap_plan_free(&p);
    else if (!err[0])
        abort();
    ap_cluster_free(&c);
}

/* The model the flags state, built and freed: a refusal must say why. */
static void build_stated(const ap_megatron *m)
{
    char err[AP_ERR_LEN];
    ap_decoder d;
    unsigned char *layers;
    ap_build_opts o;
    ap_graph *g = NULL;
    ap_build_opts_default(&o);
    o.seq = m->shape.seq ? m->shape.seq : 64;
    err[0] = 0;
    int rc = ap_megatron_model(m, &d, &layers, err);
    if (rc == AP_OK)
        rc = ap_graph_from_decoder(&d, AP_MEGATRON_SOURCE, &o, &g, err);
    if (rc != AP_OK && !err[0])
        abort();
    ap_graph_free(g);
    free(layers);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 8192)
        return 0;
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    char err[AP_ERR_LEN];
    ap_megatron m;
    ap_megatron_default(&m);
    err[0] = 0;
    int rc = data[0] & 1 ? ap_megatron_parse_args(text, &m, err)
                         : ap_megatron_parse(text, &m, err);
    if (rc == AP_OK && ap_megatron_states_model(&m))
        build_stated(&m);
    if (rc == AP_OK)
        price(&m);
    else if (!err[0])
        abort(); /* a refusal must say why */
    unsigned char moe[61];
    err[0] = 0;
    if (ap_moe_freq_parse(text, 61, moe, err) && !err[0])
        abort();
    free(text);
    return 0;
}
