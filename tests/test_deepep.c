/* test_deepep.c -- Megatron-Core's flex token dispatcher with DeepEP or
 * HybridEP (--moe-token-dispatcher-type flex; docs/cost-model.md, "Mixture
 * of experts"): each token reaches each node and each GPU holding one of
 * its experts once, where the alltoall dispatcher sends every one of its
 * top_k copies. */
#include "costmodel/costmodel.h"
#include "model.h"
#include "test.h"

/* The chance that top_k experts chosen uniformly from E hit a given set of
 * `held`: 1 - C(E - held, k) / C(E, k). */
static void a_token_hits_a_rank_by_the_hypergeometric_rule(void)
{
    /* One expert of 8, two chosen: 1 - (7*6)/(8*7) = 1/4. */
    CHECK_NEAR(ap_route_hit(8, 1, 2), 0.25, 1e-15);
    /* DeepSeek-V3's 256 experts, top 8, over 8 nodes of 32. */
    double miss = 1;
    for (int i = 0; i < 8; i++)
        miss *= (224.0 - i) / (256.0 - i);
    CHECK_NEAR(ap_route_hit(256, 32, 8), 1 - miss, 1e-15);
    CHECK(ap_route_hit(256, 32, 8) > 0.66 && ap_route_hit(256, 32, 8) < 0.67);
    CHECK(ap_route_hit(8, 8, 2) == 1);
    CHECK(ap_route_hit(8, 7, 2) == 1); /* no two experts left outside */
}

/* Group-limited routing for a set of whole groups: 2 of 4 groups, the
 * token's 2 groups of 4 include none of them (1 in 6), one (4 in 6: then
 * its top_k within the two chosen groups' experts must pick the set's
 * half) or both (1 in 6: hit). Without a limit the rule is the plain one. */
static void group_limited_routing_counts_the_groups_chosen(void)
{
    double e = 64;
    int k = 4;
    double want = 4.0 / 6 * ap_route_hit(32, 16, k) + 1.0 / 6;
    CHECK_NEAR(ap_route_hit_groups(e, 32, k, 4, 2), want, 1e-15);
    CHECK_NEAR(ap_route_hit_groups(e, 16, k, 4, 2), 0.5 * ap_route_hit(32, 16, k), 1e-15);
    CHECK(ap_route_hit_groups(e, 16, k, 4, 4) == ap_route_hit(e, 16, k));
    CHECK(ap_route_hit_groups(e, 16, k, 0, 0) == ap_route_hit(e, 16, k));
}

/* In one node with one expert per GPU no two copies of a token share a
 * GPU, so DeepEP moves what the all-to-all moves: (n-1)/n of the k
 * copies, at NVLink's bandwidth, after the same hops. */
static void one_expert_per_gpu_in_a_node_is_the_all_to_all(void)
{
    ap_cluster c = ap_test_h100(8);
    double tokens = 4096.0 * 2048 * 2; /* a rank's tokens, one copy each */
    double a2a = ap_cost_alltoall(&c, 8, 1, tokens * 2);
    ap_routing r = {8, 2, 0, 0};
    CHECK_NEAR(ap_cost_deepep(&c, 8, 1, &r, tokens), a2a, 1e-12);
    ap_cluster_free(&c);
}

/* Two experts per GPU: a token whose two experts share a GPU goes there
 * once. Of 16 experts on 8 GPUs, top 2, a GPU is hit with chance
 * 1 - (14*13)/(16*15); the rank sends tokens * 7 * that, less than the
 * all-to-all's 2 * 7/8. */
static void copies_bound_for_one_gpu_travel_once(void)
{
    ap_cluster c = ap_test_h100(8);
    double tokens = 1e8;
    double hit = 1 - 14.0 * 13 / (16.0 * 15);
    double want = 7 * c.intra_lat + tokens * 7 * hit / c.intra_bw;
    ap_routing r = {16, 2, 0, 0};
    CHECK_NEAR(ap_cost_deepep(&c, 8, 1, &r, tokens), want, 1e-12);
    CHECK(want < ap_cost_alltoall(&c, 8, 1, 2 * tokens));
    ap_cluster_free(&c);
}

/* Across nodes a token crosses to each other node that holds one of its
 * experts once, over its rank's own rail; NVLink fans it out meanwhile.
 * DeepSeek-V3's 256 experts on 64 GPUs of 8 nodes, top 8: 7 * 0.662 of the
 * tokens leave each rank, where the all-to-all sends 8 * 56/64 copies. */
static void a_token_crosses_to_each_node_once(void)
{
    ap_cluster c = ap_test_h100(64);
    double tokens = 4096.0 * 7168 * 2;
    double rdma = tokens * 7 * ap_route_hit(256, 32, 8) / c.inter_bw;
    double nvlink = tokens * 7 * ap_route_hit(256, 4, 8) * 8 / c.intra_bw;
    CHECK(rdma > nvlink);
    double lat = 56 * c.intra_lat + 7 * c.inter_lat;
    ap_routing r = {256, 8, 0, 0};
    CHECK_NEAR(ap_cost_deepep(&c, 64, 8, &r, tokens), lat + rdma, 1e-12);
    double a2a = ap_cost_alltoall(&c, 64, 8, 8 * tokens);
    CHECK_NEAR(a2a, lat + 8 * tokens * 56 / 64 / c.inter_bw, 1e-12);
    CHECK_NEAR((ap_cost_deepep(&c, 64, 8, &r, tokens) - lat) / (a2a - lat),
               7 * ap_route_hit(256, 32, 8) / 7, 1e-12);
    /* DeepSeek-V3 routes each token within 4 of 8 groups of 32 experts, one
     * group a node here: a node is hit when its group is one of the four
     * (1/2) and the token's 8 experts among their 128 include one of its
     * 32, so fewer nodes are crossed to. */
    ap_routing grouped = {256, 8, 8, 4};
    double hit = 0.5 * ap_route_hit(128, 32, 8);
    CHECK_NEAR(ap_route_hit_groups(256, 32, 8, 8, 4), hit, 1e-15);
    CHECK_NEAR(ap_cost_deepep(&c, 64, 8, &grouped, tokens),
               lat + tokens * 7 * hit / c.inter_bw, 1e-12);
    CHECK(hit < ap_route_hit(256, 32, 8));
    ap_cluster_free(&c);
}

/* In a plan, the dispatch and combine of Qwen3-30B-A3B (128 experts, top 8,
 * hidden 2048) on 16 GPUs of 2 nodes with ep = 16 each exchange a rank's
 * 1024 tokens by ap_cost_deepep under the flex dispatcher, forward and
 * backward; the rest of the step is the same. */
static void the_flex_dispatcher_prices_dispatch_and_combine(void)
{
    ap_graph *g = ap_test_model("examples/hf/qwen3-30b-a3b.json", 1024);
    ap_cluster c;
    ap_plan a2a, flex;
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 16, "ep=16,mbs=1,gbs=16", &c, &a2a), "alltoall");
    REQUIRE_OK(ap_test_megatron_plan_ok(g, 16, "ep=16,mbs=1,gbs=16,dispatcher=hybridep", NULL,
                                        &flex), "hybridep");
    double tokens = 1024.0 * 2048 * 2;
    ap_routing r = {128, 8, 0, 0};
    double want = ap_cost_deepep(&c, 16, 2, &r, tokens);
    const char *names[] = {"l0.dispatch", "l0.combine"};
    for (int i = 0; i < 2; i++) {
        double fwd, bwd;
        ap_test_op_comm(g, &c, &flex, names[i], &fwd, &bwd);
        CHECK_NEAR(fwd, want, 1e-9);
        CHECK_NEAR(bwd, want, 1e-9);
    }
    double saved = 4 * 48 * (ap_cost_alltoall(&c, 16, 2, 8 * tokens) - want);
    CHECK(saved > 0);
    CHECK_NEAR(a2a.stages[0].kinds.expert - flex.stages[0].kinds.expert, saved, 1e-9);
    ap_plan_free(&a2a);
    ap_plan_free(&flex);
    ap_cluster_free(&c);
    ap_graph_free(g);
}

int main(void)
{
    RUN(a_token_hits_a_rank_by_the_hypergeometric_rule);
    RUN(group_limited_routing_counts_the_groups_chosen);
    RUN(one_expert_per_gpu_in_a_node_is_the_all_to_all);
    RUN(copies_bound_for_one_gpu_travel_once);
    RUN(a_token_crosses_to_each_node_once);
    RUN(the_flex_dispatcher_prices_dispatch_and_combine);
    return DONE();
}
