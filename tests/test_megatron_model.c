/* The model a Megatron-LM script states with no model file: its flags, read
 * with Megatron-LM's defaults (arguments.py) for those it leaves out, and
 * its vocabulary as the tokenizer gives it, padded to a multiple of
 * --make-vocab-size-divisible-by (128) x tp (_vocab_size_with_padding).
 * tests/cli/megatron_script.sh checks that every family's exported flags
 * build the model they came from. */
#include "model.h"

/* The graph a command line's flags build at its --seq-length; NULL, with
 * the message in err, when they are refused. */
static ap_graph *script_graph(const char *args, char *err)
{
    ap_megatron m;
    ap_decoder d;
    unsigned char *moe_layer;
    ap_build_opts o;
    ap_graph *g = NULL;
    ap_megatron_default(&m);
    ap_build_opts_default(&o);
    if (ap_megatron_parse_args(args, &m, err))
        return NULL;
    o.seq = m.shape.seq;
    if (!ap_megatron_model(&m, &d, &moe_layer, err))
        ap_graph_from_decoder(&d, AP_MEGATRON_SOURCE, &o, &g, err);
    free(moe_layer);
    return g;
}

static long long dim(const ap_graph *g, char label)
{
    const ap_dim *d = ap_graph_dim(g, label);
    return d ? (long long)d->size : 0;
}

/* Megatron-LM's GPT with nothing but its sizes (and --fp16, without which
 * it would train in fp32, refused below): learned positions, LayerNorm
 * with biases, a GELU MLP 4 x hidden wide, biases on every linear layer,
 * tied embeddings; pretrain_gpt.py's GPT2BPETokenizer, whose 50,257 tokens
 * are padded to 128 x 8. */
static void a_bare_gpt_script_gets_megatron_defaults(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = script_graph("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
                               "--seq-length 2048 --max-position-embeddings 2048 "
                               "--tensor-model-parallel-size 8 --fp16", err);
    CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    long long h = 1024, L = 4, V = 51200, P = 2048;
    CHECK(dim(g, 'v') == V);
    CHECK(dim(g, 'f') == 4 * h);
    CHECK(dim(g, 'p') == P);
    /* Per layer: QKV and output 4h^2 + 4h, MLP 8h^2 + 5h, two LayerNorms
     * 4h; then the tied table, the position table and the final norm. */
    CHECK(g->total_params == (double)(L * (12 * h * h + 13 * h) + (V + P) * h + 2 * h));
    ap_graph_free(g);
}

/* Under --swiglu without --ffn-hidden-size, Megatron-LM keeps the MLP's
 * parameters near 8h^2: int(4h x 2/3 / 64) x 64, 10,880 for 4,096. */
static void swiglu_ffn_defaults_to_two_thirds_of_four_h(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = script_graph("--num-layers 1 --hidden-size 4096 --num-attention-heads 32 "
                               "--seq-length 1024 --position-embedding-type rope --swiglu "
                               "--normalization RMSNorm --disable-bias-linear "
                               "--tokenizer-type NullTokenizer --vocab-size 32000 --bf16", err);
    CHECK(g && dim(g, 'f') == 10880);
    /* NullTokenizer adds an end-of-document token: 32,001 padded to 128. */
    CHECK(g && dim(g, 'v') == 32128);
    CHECK(g && dim(g, 'p') == 0);
    ap_graph_free(g);
}

/* --group-query-attention without --num-query-groups is one group
 * (multi-query attention), Megatron-LM's default. */
static void one_query_group_by_default(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = script_graph("--num-layers 1 --hidden-size 1024 --num-attention-heads 8 "
                               "--seq-length 1024 --position-embedding-type rope "
                               "--group-query-attention --vocab-size 1000 "
                               "--tokenizer-type TikTokenizer --bf16", err);
    CHECK(g && dim(g, 'g') == 1 && dim(g, 'n') == 8);
    ap_graph_free(g);
}

/* The same model from a script and from its Hugging Face config: Llama 3
 * 8B's two layers at 4,096 tokens, the vocabulary stated with a divisor
 * of 1. */
static void a_llama_script_builds_the_llama_graph(void)
{
    char err[AP_ERR_LEN];
    ap_graph *s = script_graph("--num-layers 2 --hidden-size 4096 --num-attention-heads 32 "
                               "--group-query-attention --num-query-groups 8 "
                               "--ffn-hidden-size 14336 --seq-length 4096 "
                               "--position-embedding-type rope --swiglu "
                               "--normalization RMSNorm --disable-bias-linear "
                               "--untie-embeddings-and-output-weights "
                               "--tokenizer-type HuggingFaceTokenizer --vocab-size 128256 "
                               "--make-vocab-size-divisible-by 1 --bf16", err);
    ap_graph *h = ap_test_hf_text(
        "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 4096,"
        " \"num_attention_heads\": 32, \"num_key_value_heads\": 8,"
        " \"intermediate_size\": 14336, \"vocab_size\": 128256,"
        " \"max_position_embeddings\": 4096}", "llama");
    CHECK(s && h);
    if (s && h) {
        CHECK(s->nops == h->nops && s->ntensors == h->ntensors);
        CHECK(s->total_params == h->total_params);
        CHECK(s->total_flops == h->total_flops);
        CHECK(s->total_saved_bytes == h->total_saved_bytes);
    }
    ap_graph_free(s);
    ap_graph_free(h);
}

/* --moe-layer-freq keeps the first layer dense: its MLP is --ffn-hidden-size
 * wide, the others route to experts --moe-ffn-hidden-size wide, top 8. */
static void moe_layer_freq_makes_the_dense_layers(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = script_graph("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 "
                               "--seq-length 1024 --position-embedding-type rope --swiglu "
                               "--normalization RMSNorm --disable-bias-linear "
                               "--ffn-hidden-size 4096 --num-experts 16 --moe-router-topk 8 "
                               "--moe-ffn-hidden-size 512 --moe-layer-freq [0]+[1]*3 "
                               "--moe-grouped-gemm --tokenizer-type TikTokenizer "
                               "--vocab-size 1000 --bf16", err);
    CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    unsigned char moe[4];
    ap_model_moe_layers(g, moe);
    CHECK(!moe[0] && moe[1] && moe[2] && moe[3]);
    CHECK(dim(g, 'f') == 4096 && dim(g, 'm') == 512 && dim(g, 'E') == 16);
    /* TikTokenizer's 1,000 tokens as --vocab-size says them, padded to 128. */
    CHECK(dim(g, 'v') == 1024);
    ap_graph_free(g);
}

/* What the flags do not say is refused, naming the flag. */
static void what_the_script_leaves_unknown_is_refused(void)
{
    char err[AP_ERR_LEN];
    const char *gpt = "--num-layers 2 --hidden-size 1000 --num-attention-heads 16 "
                      "--seq-length 1024 --max-position-embeddings 1024 ";
    char line[512];
    CHECK(!script_graph("--hidden-size 1024 --num-attention-heads 16", err));
    CHECK_STR_HAS(err, "--num-layers is missing");
    snprintf(line, sizeof line, "%s--tokenizer-type GPT2BPETokenizer", gpt);
    CHECK(!script_graph(line, err));
    CHECK_STR_HAS(err, "--hidden-size is not divisible by --num-attention-heads");
    snprintf(line, sizeof line, "%s--kv-channels 64 --tokenizer-type SentencePieceTokenizer",
             gpt);
    CHECK(!script_graph(line, err));
    CHECK_STR_HAS(err, "--tokenizer-type SentencePieceTokenizer keeps its vocabulary");
    snprintf(line, sizeof line, "%s--kv-channels 64 --vocab-size 100 --num-experts 4 "
             "--swiglu --moe-grouped-gemm", gpt);
    CHECK(!script_graph(line, err));
    CHECK_STR_HAS(err, "--num-experts without --disable-bias-linear");
    snprintf(line, sizeof line, "%s--kv-channels 64 --vocab-size 100 "
             "--multi-latent-attention", gpt);
    CHECK(!script_graph(line, err));
    CHECK_STR_HAS(err, "--multi-latent-attention without --position-embedding-type rope");
    /* Neither --bf16 nor --fp16: Megatron-LM's fp32 training. */
    snprintf(line, sizeof line, "%s--kv-channels 64", gpt);
    CHECK(!script_graph(line, err));
    CHECK_STR_HAS(err, "no --bf16 or --fp16, so Megatron-LM trains in fp32");
}

int main(void)
{
    RUN(a_bare_gpt_script_gets_megatron_defaults);
    RUN(swiglu_ffn_defaults_to_two_thirds_of_four_h);
    RUN(one_query_group_by_default);
    RUN(a_llama_script_builds_the_llama_graph);
    RUN(moe_layer_freq_makes_the_dense_layers);
    RUN(what_the_script_leaves_unknown_is_refused);
    return DONE();
}
