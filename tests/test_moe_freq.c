/* Which layers are MoE, as Megatron-LM's --moe-layer-freq says it: an
 * integer N (every Nth layer from the first) or a Python list expression
 * Megatron-LM evaluates; autopar reads both and writes the model's own
 * pattern in the shortest form Megatron-LM reads back. DeepSeek-V3's
 * shape: 3 dense layers, then 58 MoE layers of experts 2,048 wide beside a
 * shared expert 2,048 wide, where its dense layers' FFN is 18,432. */
#include "model.h"

#include "planner/planner.h"

static int same(const unsigned char *a, const unsigned char *b, int n)
{
    return !memcmp(a, b, (size_t)n);
}

static void expressions_evaluate_as_python_does(void)
{
    unsigned char got[61], want[61];
    char err[AP_ERR_LEN];
    memset(want, 1, sizeof want);
    memset(want, 0, 3);
    CHECK(ap_moe_freq_parse("[0]*3+[1]*58", 61, got, err) == AP_OK && same(got, want, 61));
    CHECK(ap_moe_freq_parse("([0]*3+[1]*58)", 61, got, err) == AP_OK && same(got, want, 61));
    CHECK(ap_moe_freq_parse(" [0, 0,0] + 58 * [1] ", 61, got, err) == AP_OK &&
          same(got, want, 61));
    /* * binds before +, a group repeats as a whole. */
    unsigned char alt[12] = {1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0};
    CHECK(ap_moe_freq_parse("([1]*3+[0])*3", 12, got, err) == AP_OK && same(got, alt, 12));
    /* Empty lists, as Python allows them (a fuzzer's find: copying none
     * of an empty list passed a null pointer to memcpy). */
    CHECK(ap_moe_freq_parse("[]*3*149+[0]*3+[]+[1]*58", 61, got, err) == AP_OK &&
          same(got, want, 61));
    CHECK(ap_moe_freq_parse("([]*3*149]", 61, got, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "expected ')'");
    /* An integer N: layers 0, N, 2N, ... are MoE. */
    unsigned char every3[7] = {1, 0, 0, 1, 0, 0, 1};
    CHECK(ap_moe_freq_parse("3", 7, got, err) == AP_OK && same(got, every3, 7));
    CHECK(ap_moe_freq_parse("1", 7, got, err) == AP_OK && got[1] && got[2]);
}

static void what_megatron_would_not_read_is_refused(void)
{
    unsigned char got[61];
    char err[AP_ERR_LEN];
    CHECK(ap_moe_freq_parse("[0]*3+[1]*57", 61, got, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "has 60 entries, but the model has 61 layers");
    CHECK(ap_moe_freq_parse("[0]*3+[2]*58", 61, got, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "an entry other than 0 or 1");
    CHECK(ap_moe_freq_parse("[1]*[1]", 61, got, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "a list times a list");
    CHECK(ap_moe_freq_parse("[1]+2", 61, got, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "a list plus a number");
    CHECK(ap_moe_freq_parse("([1]*61", 61, got, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "expected ')'");
    CHECK(ap_moe_freq_parse("0", 61, got, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "a frequency below 1");
    CHECK(ap_moe_freq_parse("two", 61, got, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--moe-layer-freq \"two\": expected a number");
    CHECK(ap_moe_freq_parse("[1]*99999999999", 61, got, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "a number too large");
    char deep[200];
    memset(deep, '(', 100);
    snprintf(deep + 100, sizeof deep - 100, "[1]");
    CHECK(ap_moe_freq_parse(deep, 1, got, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "parentheses nested deeper than 32");
}

/* The shortest form, and what it says read back is the pattern. */
static void a_pattern_is_written_in_the_shortest_form(void)
{
    struct {
        const char *pattern, *written;
        int layers;
    } c[] = {
        {"[1]*32", "", 32},
        {"2", "2", 32},
        {"[0]*3+[1]*58", "[0]*3+[1]*58", 61},
        {"([0]+[1])*24", "([0]+[1])*24", 48},
        {"[0]+[1]*46+[0]", "[0]+[1]*46+[0]", 48},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        unsigned char moe[64], back[64];
        char err[AP_ERR_LEN], text[256];
        CHECK(ap_moe_freq_parse(c[i].pattern, c[i].layers, moe, err) == AP_OK);
        CHECK(ap_moe_freq_format(moe, c[i].layers, text, sizeof text) == 0);
        CHECK(!strcmp(text, c[i].written));
        if (text[0])
            CHECK(ap_moe_freq_parse(text, c[i].layers, back, err) == AP_OK &&
                  same(moe, back, c[i].layers));
    }
}

static void deepseek_v3s_experts_are_stated_as_megatron_builds_them(void)
{
    ap_graph *g = ap_test_model("examples/hf/deepseek-v3.json", 1024);
    if (!g) {
        CHECK(0);
        return;
    }
    ap_model_shape s;
    ap_model_shape_of(g, &s);
    CHECK(s.ffn == 18432 && s.moe_ffn == 2048 && s.shared_ffn == 2048);
    CHECK(!strcmp(s.moe_freq, "[0]*3+[1]*58"));
    unsigned char moe[61];
    CHECK(ap_model_moe_layers(g, moe) == 58 && !moe[2] && moe[3]);
    ap_graph_free(g);
    g = ap_test_model("examples/hf/mixtral-8x7b.json", 1024);
    if (!g) {
        CHECK(0);
        return;
    }
    ap_model_shape_of(g, &s);
    CHECK(s.moe_ffn == 14336 && s.shared_ffn == 0 && s.moe_freq[0] == '\0');
    ap_graph_free(g);
}

int main(void)
{
    RUN(expressions_evaluate_as_python_does);
    RUN(what_megatron_would_not_read_is_refused);
    RUN(a_pattern_is_written_in_the_shortest_form);
    RUN(deepseek_v3s_experts_are_stated_as_megatron_builds_them);
    return DONE();
}
