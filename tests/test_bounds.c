/* test_bounds.c -- loading stays linear and bounded: names are found by
 * hash, layer classes are matched by signature, and inputs past the
 * documented caps are refused with the field named. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "costmodel/costmodel.h"
#include "graph/graph.h"
#include "planner/planner.h"
#include "test.h"

/* A chain x -> t0 -> t1 ... of n unary ops, op i in layer i; the kind of
 * op i is gelu, or relu when i is a multiple of `period`. */
static ap_graph *chain(int n, int period, char *err)
{
    ap_graph *g = ap_graph_new("chain");
    ap_graph_add_dim(g, 'b', "batch", AP_DIM_BATCH, 2, err);
    ap_graph_add_dim(g, 'h', "hidden", AP_DIM_HIDDEN, 8, err);
    ap_graph_add_dim(g, 'g', "other", AP_DIM_OTHER, 8, err);
    ap_graph_add_tensor(g, "x", "bh", AP_BF16, AP_TENSOR_INPUT, err);
    ap_graph_add_tensor(g, "w", "hg", AP_BF16, AP_TENSOR_PARAM, err);
    char a[32], b[32], name[32];
    ap_graph_add_tensor(g, "t0", "bg", AP_BF16, AP_TENSOR_ACT, err);
    const char *in0[] = {"x", "w"}, *out0[] = {"t0"};
    ap_graph_add_op(g, "in", AP_OP_MATMUL, 0, -1, in0, 2, out0, 1, err);
    for (int i = 0; i < n; i++) {
        snprintf(a, sizeof a, "t%d", i);
        snprintf(b, sizeof b, "t%d", i + 1);
        snprintf(name, sizeof name, "op%d", i);
        ap_graph_add_tensor(g, b, "bg", AP_BF16, AP_TENSOR_ACT, err);
        const char *in[] = {a}, *out[] = {b};
        int sub = i % period ? AP_UNARY_GELU : AP_UNARY_RELU;
        if (ap_graph_add_op(g, name, AP_OP_UNARY, sub, i, in, 1, out, 1, err) < 0)
            return g;
    }
    return g;
}

static void names_are_found_among_many(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = chain(20000, 1, err);
    CHECK(g->nops == 20001 && g->ntensors == 20003);
    CHECK(ap_graph_find_tensor(g, "t12345") == 12347);
    CHECK(ap_graph_find_op(g, "op19999") == 20000);
    CHECK(ap_graph_find_tensor(g, "t20001") == -1);
    CHECK(ap_graph_find_op(g, "t5") == -1);
    /* A duplicate far from the first is still caught, and names the first. */
    CHECK(ap_graph_add_tensor(g, "t7", "bg", AP_BF16, AP_TENSOR_ACT, err) == -1);
    CHECK_STR_HAS(err, "\"t7\" is already tensors[9]");
    REQUIRE_OK(ap_graph_finalize(g, err), err);
    ap_graph_free(g);
}

static void layer_classes_follow_the_kinds_of_their_ops(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = chain(3000, 3, err);
    REQUIRE_OK(ap_graph_finalize(g, err), err);
    CHECK(g->nlayers == 3000);
    /* Layer l is relu when l % 3 == 0, else gelu: classes 0 and 1. */
    int wrong = 0;
    for (int l = 0; l < g->nlayers; l++)
        wrong += g->layer_class[l] != (l % 3 ? 1 : 0);
    CHECK(wrong == 0);
    ap_graph_free(g);
}

static void loading_from_memory_equals_loading_the_file(void)
{
    char err[AP_ERR_LEN], path[512];
    snprintf(path, sizeof path, "%s/examples/gpt-tiny.json", ap_test_src());
    char *text;
    size_t len;
    REQUIRE_OK(ap_read_file(path, &text, &len, err), err);
    ap_graph *a = NULL, *b = NULL;
    REQUIRE_OK(ap_graph_load(path, NULL, &a, err), err);
    REQUIRE_OK(ap_graph_load_buffer(text, len, "tiny", NULL, &b, err), err);
    CHECK(a && b && a->nops == b->nops && a->total_flops == b->total_flops);
    CHECK(b && !strcmp(b->source, "tiny"));
    ap_build_opts o;
    ap_build_opts_default(&o);
    o.seq = (int64_t)AP_MAX_SEQ + 1;
    ap_graph *c = NULL;
    CHECK(ap_graph_load_buffer(text, len, "tiny", &o, &c, err) == AP_EINPUT);
    CHECK(c == NULL);
    CHECK_STR_HAS(err, "tiny: sequence length must be from 1 to 16777216");
    ap_graph_free(a);
    ap_graph_free(b);
    free(text);
}

static void an_empty_buffer_is_refused_not_read_before_its_start(void)
{
    char err[AP_ERR_LEN];
    ap_graph *g = NULL;
    CHECK(ap_graph_load_buffer("", 0, "empty", NULL, &g, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "empty: line 1, column 1");
    ap_cluster c;
    CHECK(ap_cluster_parse("", 0, "empty", 0, 0, &c, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "empty");
}

static void megatron_sizes_that_overflow_an_int_are_refused(void)
{
    char err[AP_ERR_LEN];
    ap_megatron m;
    ap_megatron_default(&m);
    REQUIRE_OK(ap_megatron_parse("tp=1073741824,pp=1073741824,cp=4", &m, err), err);
    ap_graph *g = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/examples/gpt-tiny.json", ap_test_src());
    REQUIRE_OK(ap_graph_load(path, NULL, &g, err), err);
    ap_cluster c;
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 16, 8, &c, err), err);
    ap_plan p;
    CHECK(ap_megatron_plan(g, &c, &m, &p, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "tp*pp*cp = 1073741824*1073741824*4 = 4611686018427387904, more than the 16 GPUs");
    ap_megatron_default(&m);
    err[0] = 0;
    CHECK(ap_megatron_parse("gbs=0", &m, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--megatron: gbs: bad value \"0\"");
    ap_cluster_free(&c);
    ap_graph_free(g);
}

int main(void)
{
    RUN(names_are_found_among_many);
    RUN(layer_classes_follow_the_kinds_of_their_ops);
    RUN(loading_from_memory_equals_loading_the_file);
    RUN(an_empty_buffer_is_refused_not_read_before_its_start);
    RUN(megatron_sizes_that_overflow_an_int_are_refused);
    return DONE();
}
