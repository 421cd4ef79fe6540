/* plan.json's model_shape states what the exports state of the model, so
 * that an export reloading another model (--model, or the file changed
 * since) is refused rather than launched under this plan: multi-latent
 * attention's dimensions and attention sinks where the model has them,
 * the rotary base, norm epsilon and rope scaling where it says them, each
 * read back exactly as written and compared with the reloaded model. A
 * plan written before a field is read as the reader documents
 * (docs/plan-format.md). */
#include "model.h"

#include <cjson/cJSON.h>

#include "planner/planner.h"

static ap_graph *load(const char *rel)
{
    return ap_test_model(rel, 0);
}

/* The config examples/hf/`rel` with `from` replaced by `to`, built at
 * `seq` tokens and named config.json; NULL, with the reason on stderr,
 * when it does not build. */
static ap_graph *variant(const char *rel, const char *from, const char *to, int64_t seq)
{
    char path[512], err[AP_ERR_LEN], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/examples/hf/%s", ap_test_src(), rel);
    if (ap_read_file(path, &text, &len, err)) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    char *at = strstr(text, from), cfg[8192];
    snprintf(cfg, sizeof cfg, "%.*s%s%s", at ? (int)(at - text) : (int)len, text, to,
             at ? at + strlen(from) : "");
    free(text);
    return ap_test_hf_seq(cfg, seq, err);
}

/* plan.json of the estimate of `spec` on `gpus` H100s as a cJSON object,
 * for a test to edit; NULL, with the reason on stderr, when it does not
 * price. The caller deletes it. */
static cJSON *plan_object(const ap_graph *g, int gpus, const char *spec)
{
    ap_plan p;
    if (ap_test_megatron_plan_ok(g, gpus, spec, NULL, &p))
        return NULL;
    char *json = ap_plan_to_json(g, &p);
    ap_plan_free(&p);
    cJSON *o = cJSON_Parse(json);
    free(json);
    return o;
}

/* o's model_shape field `key` replaced by the JSON `value`, or removed
 * where value is NULL; then read back as "plan.json" into d, deleting o.
 * The reader's status, its message in err. */
static int read_edited(cJSON *o, const char *key, const char *value, ap_plan_desc *d,
                       char *err)
{
    if (!o) {
        snprintf(err, AP_ERR_LEN, "the plan did not price");
        return -1;
    }
    cJSON *shape = cJSON_GetObjectItem(o, "model_shape");
    cJSON_DeleteItemFromObject(shape, key);
    if (value)
        cJSON_AddItemToObject(shape, key, cJSON_Parse(value));
    char *json = cJSON_Print(o);
    cJSON_Delete(o);
    int rc = ap_plan_desc_parse(json, strlen(json), "plan.json", d, err);
    free(json);
    return rc;
}

/* The refusal of an export of plan d against g, by every launcher: the
 * message names model_shape.`field`, the plan's value and g's. */
static void check_refused(const ap_graph *g, const ap_plan_desc *d, const char *field,
                          const char *want, const char *have)
{
    char err[AP_ERR_LEN], expect[AP_ERR_LEN], *text = NULL;
    snprintf(expect, sizeof expect, "plan.json: model_shape.%s is %s but the model %s has "
             "%s; pass the plan's model with --model", field, want, g->source, have);
    for (int to = 0; to < 3; to++) {
        CHECK(ap_export(g, d, (ap_launcher)to, &text, err) == AP_EINPUT);
        CHECK_STR_HAS(err, expect);
        CHECK(text == NULL);
    }
}

/* DeepSeek-V2-Lite's MLA: no query compression (q_lora_rank null), a
 * 512-wide key-value latent, query and key heads of 128 + 64 rotary
 * dimensions, values of 128. plan.json records them as Megatron-LM's flags
 * name them, and the export states them. */
static void mla_dimensions_travel_in_the_plan(void)
{
    ap_graph *g = load("examples/hf/deepseek-v2-lite.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=64", &d, NULL),
               "see above");
    CHECK(d.shape.mla == 1);
    CHECK(d.shape.q_lora == 0);
    CHECK(d.shape.kv_lora == 512);
    CHECK(d.shape.qk_nope_dim == 128);
    CHECK(d.shape.qk_rope_dim == 64);
    CHECK(d.shape.v_head_dim == 128);
    CHECK(d.shape.head_dim == 192);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --multi-latent-attention\n  --kv-lora-rank 512\n"
                        "  --qk-head-dim 128\n  --qk-pos-emb-head-dim 64\n"
                        "  --v-head-dim 128\n");
    CHECK(text && !strstr(text, "--q-lora-rank"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* DeepSeek-V2-Lite with another latent, with compressed queries or with
 * values of 64 has every width plan.json recorded before MLA's, and would
 * export its own flags under this plan; so would a plan edited to other
 * query and key dimensions. Each is refused naming the field. */
static void export_refuses_a_model_with_other_mla_dimensions(void)
{
    ap_graph *g = load("examples/hf/deepseek-v2-lite.json");
    const char *spec = "tp=1,pp=1,ep=8,mbs=1,gbs=64";
    ap_plan_desc d;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_test_megatron_desc(g, 8, spec, &d, NULL), "see above");
    const struct {
        const char *from, *to, *field, *want, *have;
    } models[] = {
        {"\"kv_lora_rank\": 512", "\"kv_lora_rank\": 256", "kv_lora_rank", "512", "256"},
        {"\"q_lora_rank\": null", "\"q_lora_rank\": 1536", "q_lora_rank", "0", "1536"},
        {"\"v_head_dim\": 128", "\"v_head_dim\": 64", "v_head_dim", "128", "64"},
    };
    for (int i = 0; i < 3; i++) {
        ap_graph *other = variant("deepseek-v2-lite.json", models[i].from, models[i].to, d.seq);
        CHECK(other != NULL);
        if (other)
            check_refused(other, &d, models[i].field, models[i].want, models[i].have);
        ap_graph_free(other);
    }
    ap_plan_desc_free(&d);
    const struct {
        const char *field, *value, *have;
    } plans[] = {
        {"qk_head_dim", "96", "128"},
        {"qk_pos_emb_head_dim", "32", "64"},
    };
    for (int i = 0; i < 2; i++) {
        REQUIRE_OK(read_edited(plan_object(g, 8, spec), plans[i].field, plans[i].value, &d,
                               err), err);
        check_refused(g, &d, plans[i].field, plans[i].value, plans[i].have);
        ap_plan_desc_free(&d);
    }
    ap_graph_free(g);
}

/* A plan without multi_latent_attention, every plan from before it among
 * them, was priced for a model without MLA: DeepSeek-V2-Lite's plan with
 * the fields taken out is planned again to export that model, while a
 * plan of a model without MLA needs none of them. */
static void a_plan_without_mla_fields_is_a_model_without_mla(void)
{
    ap_graph *g = load("examples/hf/deepseek-v2-lite.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    cJSON *o = plan_object(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=64");
    const char *fields[] = {"q_lora_rank", "kv_lora_rank", "qk_head_dim",
                            "qk_pos_emb_head_dim", "v_head_dim"};
    cJSON *shape = o ? cJSON_GetObjectItem(o, "model_shape") : NULL;
    for (int i = 0; shape && i < 5; i++)
        cJSON_DeleteItemFromObject(shape, fields[i]);
    REQUIRE_OK(read_edited(o, "multi_latent_attention", NULL, &d, err), err);
    CHECK(d.shape.mla == 0 && d.shape.kv_lora == 0);
    check_refused(g, &d, "multi_latent_attention", "false", "true");
    ap_plan_desc_free(&d);
    ap_graph_free(g);

    g = load("examples/hf/llama-3-8b.json");
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=8,pp=1,sp=1,mbs=1,gbs=64", &d, NULL),
               "see above");
    CHECK(d.shape.mla == 0);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK(text && !strstr(text, "--multi-latent-attention"));
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* The reader names the MLA and sinks field at fault: dimensions without
 * multi_latent_attention, one missing under it, a negative or fractional
 * one, a flag that is not true or false. */
static void reader_checks_the_attention_fields(void)
{
    ap_graph *llama = load("examples/hf/llama-3-8b.json");
    ap_graph *dsv2 = load("examples/hf/deepseek-v2-lite.json");
    const char *llama_spec = "tp=8,pp=1,sp=1,mbs=1,gbs=64";
    const char *dsv2_spec = "tp=1,pp=1,ep=8,mbs=1,gbs=64";
    const struct {
        int mla;
        const char *key, *value, *expect;
    } cases[] = {
        {0, "kv_lora_rank", "512",
         "plan.json: model_shape.kv_lora_rank: given, but multi_latent_attention is not true"},
        {1, "v_head_dim", NULL, "plan.json: model_shape.v_head_dim: missing"},
        {1, "kv_lora_rank", "-1",
         "plan.json: model_shape.kv_lora_rank: -1 is out of range"},
        {1, "qk_head_dim", "127.5", "plan.json: model_shape.qk_head_dim: expected an integer"},
        {1, "multi_latent_attention", "1",
         "plan.json: model_shape.multi_latent_attention: expected true or false"},
        {0, "attention_sinks", "\"learnable\"",
         "plan.json: model_shape.attention_sinks: expected true or false"},
    };
    for (int i = 0; i < 6; i++) {
        ap_plan_desc d;
        char err[AP_ERR_LEN];
        cJSON *o = cases[i].mla ? plan_object(dsv2, 8, dsv2_spec)
                                : plan_object(llama, 8, llama_spec);
        CHECK(read_edited(o, cases[i].key, cases[i].value, &d, err) == AP_EINPUT);
        CHECK_STR_HAS(err, cases[i].expect);
    }
    ap_graph_free(dsv2);
    ap_graph_free(llama);
}

/* GPT-OSS's learned sink per head is Megatron-LM's --softmax-type
 * learnable: its plan says so, and a plan without it (as every plan from
 * before the field) is refused for GPT-OSS, as is Llama's plan edited to
 * have sinks for Llama. */
static void attention_sinks_travel_in_the_plan(void)
{
    ap_graph *g = load("examples/hf/gpt-oss-20b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=64", &d, NULL),
               "see above");
    CHECK(d.shape.sinks == 1);
    CHECK(d.shape.mla == 0);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --softmax-type learnable\n");
    free(text);
    ap_plan_desc_free(&d);
    REQUIRE_OK(read_edited(plan_object(g, 8, "tp=1,pp=1,ep=8,mbs=1,gbs=64"),
                           "attention_sinks", NULL, &d, err), err);
    check_refused(g, &d, "attention_sinks", "false", "true");
    ap_plan_desc_free(&d);
    ap_graph_free(g);

    g = load("examples/hf/llama-3-8b.json");
    REQUIRE_OK(read_edited(plan_object(g, 8, "tp=8,pp=1,sp=1,mbs=1,gbs=64"),
                           "attention_sinks", "true", &d, err), err);
    check_refused(g, &d, "attention_sinks", "true", "false");
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* Llama 3 8B's rope_theta 500,000 and rms_norm_eps 1e-5, which the
 * Megatron-LM export states as --rotary-base and --norm-epsilon, are
 * checked against the reloaded model where the plan has them; a plan
 * without them (before session 31) exports the reloaded model's. */
static void export_checks_the_rotary_base_and_norm_epsilon(void)
{
    ap_graph *g = load("examples/hf/llama-3-8b.json");
    const char *spec = "tp=8,pp=1,sp=1,mbs=1,gbs=64";
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    const struct {
        const char *key, *value, *want, *have;
    } cases[] = {
        {"rope_base", "10000", "10000", "500000"},
        {"norm_eps", "1e-6", "1e-06", "1e-05"},
        {"rope_scaling", "\"llama3\"", "\"llama3\"", "(none)"},
        {"rope_scaling_factor", "8", "8", "0"},
    };
    for (int i = 0; i < 4; i++) {
        REQUIRE_OK(read_edited(plan_object(g, 8, spec), cases[i].key, cases[i].value, &d, err),
                   err);
        check_refused(g, &d, cases[i].key, cases[i].want, cases[i].have);
        ap_plan_desc_free(&d);
    }
    cJSON *o = plan_object(g, 8, spec);
    cJSON *shape = o ? cJSON_GetObjectItem(o, "model_shape") : NULL;
    cJSON_DeleteItemFromObject(shape, "rope_base");
    REQUIRE_OK(read_edited(o, "norm_eps", NULL, &d, err), err);
    CHECK(d.shape.rope_base == 0 && d.shape.norm_eps == 0);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --rotary-base 500000\n");
    CHECK_STR_HAS(text, "  --norm-epsilon 1e-05\n");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

/* The export compares model_shape's numbers exactly, so the plan writes
 * them in the fewest digits that read back exactly: StarCoder2's
 * rope_theta 999999.4420358813 as its config gives it, and the 6/7 of a
 * NeoX rotating 96 of its 112-wide heads as 0.8571428571428571, which
 * cJSON's own printing wrote as 0.857142857142857, so that the plan
 * refused its own model. A rope_base edited to 999999.44 is refused with
 * both numbers in the digits that tell them apart. */
static void model_numbers_read_back_exactly(void)
{
    ap_graph *g = load("examples/hf/starcoder2-3b.json");
    ap_plan_desc d;
    char err[AP_ERR_LEN], *text = NULL;
    REQUIRE_OK(ap_test_megatron_desc(g, 8, "tp=2,pp=1,sp=1,mbs=1,gbs=64", &d, NULL),
               "see above");
    CHECK(d.shape.rope_base == 999999.4420358813);
    CHECK(d.shape.norm_eps == 1e-5);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    free(text);
    ap_plan_desc_free(&d);
    REQUIRE_OK(read_edited(plan_object(g, 8, "tp=2,pp=1,sp=1,mbs=1,gbs=64"), "rope_base",
                           "999999.44", &d, err), err);
    check_refused(g, &d, "rope_base", "999999.44", "999999.4420358813");
    ap_plan_desc_free(&d);
    ap_graph_free(g);

    g = ap_test_hf_text("{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 2,"
                        " \"hidden_size\": 448, \"num_attention_heads\": 4,"
                        " \"intermediate_size\": 1792, \"vocab_size\": 1024,"
                        " \"max_position_embeddings\": 128,"
                        " \"rotary_pct\": 0.8571428571428571,"
                        " \"use_parallel_residual\": false}", "neox.json");
    REQUIRE_OK(g ? 0 : -1, "neox.json did not load");
    ap_plan p;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 2, "tp=2,pp=1,mbs=1,gbs=8", NULL, &p), "see above");
    char *json = ap_plan_to_json(g, &p);
    CHECK_STR_HAS(json, "\"rotary_percent\":\t0.8571428571428571,");
    int rc = ap_plan_desc_parse(json, strlen(json), "plan.json", &d, err);
    free(json);
    ap_plan_free(&p);
    REQUIRE_OK(rc, err);
    CHECK(d.shape.rotary_percent == 96.0 / 112);
    REQUIRE_OK(ap_export(g, &d, AP_LAUNCHER_MEGATRON, &text, err), err);
    CHECK_STR_HAS(text, "  --rotary-percent 0.8571428571428571\n");
    free(text);
    ap_plan_desc_free(&d);
    ap_graph_free(g);
}

int main(void)
{
    RUN(mla_dimensions_travel_in_the_plan);
    RUN(export_refuses_a_model_with_other_mla_dimensions);
    RUN(a_plan_without_mla_fields_is_a_model_without_mla);
    RUN(reader_checks_the_attention_fields);
    RUN(attention_sinks_travel_in_the_plan);
    RUN(export_checks_the_rotary_base_and_norm_epsilon);
    RUN(model_numbers_read_back_exactly);
    return DONE();
}
