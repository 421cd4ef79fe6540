/* test_cost_comm.c -- collectives against the nccl-tests definitions and
 * the communication volumes of the seed notes (000_*.txt). */
#include "costmodel/costmodel.h"
#include "model.h"

#define GIB (1024.0 * 1024 * 1024)

/* nccl-tests: busbw = algbw * 2(n-1)/n for all-reduce; alpha is NCCL's
 * ring latency, one NVLink hop per each of the 2(n-1) steps. */
static void allreduce_matches_nccl_tests_busbw(void)
{
    ap_cluster c = ap_test_h100(8);
    double alpha = 14 * c.intra_lat;
    CHECK_NEAR(ap_cost_allreduce(&c, 8, 1, GIB), 2 * 7.0 / 8 * GIB / 360e9 + alpha, 1e-12);
}

static void gather_scatter_and_alltoall_move_half_an_allreduce(void)
{
    ap_cluster c = ap_test_h100(8);
    double beta = 7.0 / 8 * GIB / 360e9, alpha = 7 * c.intra_lat;
    CHECK_NEAR(ap_cost_allgather(&c, 8, 1, GIB), beta + alpha, 1e-12);
    CHECK_NEAR(ap_cost_reducescatter(&c, 8, 1, GIB), beta + alpha, 1e-12);
    CHECK_NEAR(ap_cost_alltoall(&c, 8, 1, GIB), beta + alpha, 1e-12);
    CHECK_NEAR(ap_cost_sendrecv(&c, 1, GIB), GIB / 360e9 + c.intra_lat, 1e-12);
}

static void a_single_rank_costs_nothing(void)
{
    ap_cluster c = ap_test_h100(8);
    CHECK(ap_cost_allreduce(&c, 1, 1, GIB) == 0);
    CHECK(ap_cost_allgather(&c, 0, 1, GIB) == 0);
    CHECK(ap_cost_allreduce(&c, 8, 1, 0) == 0);
}

/* Across nodes each GPU drives its own 45 GB/s rail: a group with r ranks
 * per node gets r rails, capped by NVLink. */
static void inter_node_groups_use_one_rail_per_gpu(void)
{
    ap_cluster c = ap_test_h100(64);
    /* 8 ranks, one per node: one rail each, and all 14 ring steps cross. */
    double one_per_node = 2 * 7.0 / 8 * GIB / 45e9 + 14 * c.inter_lat;
    CHECK_NEAR(ap_cost_allreduce(&c, 8, 8, GIB), one_per_node, 1e-12);
    /* 16 ranks over 2 nodes: 8 rails x 45 GB/s = 360 GB/s, NVLink's figure. */
    double beta = 2 * 15.0 / 16 * GIB / 360e9;
    double alpha = 28 * c.intra_lat + 2 * c.inter_lat; /* 2 of 30 steps cross */
    CHECK_NEAR(ap_cost_allreduce(&c, 16, 2, GIB), beta + alpha, 1e-12);
    /* 4 ranks per node over 2 nodes: 4 rails. */
    CHECK_NEAR(ap_cost_allgather(&c, 8, 2, GIB),
               7.0 / 8 * GIB / 180e9 + 6 * c.intra_lat + c.inter_lat, 1e-12);
    CHECK_NEAR(ap_cost_sendrecv(&c, 2, GIB), GIB / 45e9 + c.inter_lat, 1e-12);
}

/* An all-to-all is no ring: what a rank sends to other nodes, (n - g)/n of
 * its buffer with g of the n ranks per node, leaves through its own 45 GB/s
 * rail, while the share for its node's other ranks crosses NVLink. */
static void alltoall_across_nodes_leaves_through_each_ranks_own_rail(void)
{
    ap_cluster c = ap_test_h100(64);
    /* 32 ranks over 4 nodes: 24/32 of the buffer crosses, at one rail. */
    double alpha = (31 - 3) * c.intra_lat + 3 * c.inter_lat;
    CHECK_NEAR(ap_cost_alltoall(&c, 32, 4, GIB), 24.0 / 32 * GIB / 45e9 + alpha, 1e-12);
    /* 8 ranks, 2 per node over 4 nodes (ep 8 strided by tp 4): 6/8 crosses. */
    alpha = (7 - 3) * c.intra_lat + 3 * c.inter_lat;
    CHECK_NEAR(ap_cost_alltoall(&c, 8, 4, GIB), 6.0 / 8 * GIB / 45e9 + alpha, 1e-12);
    /* One rank per node: all of it but its own share crosses, as a ring's
     * bandwidth would give too. */
    CHECK_NEAR(ap_cost_alltoall(&c, 8, 8, GIB),
               7.0 / 8 * GIB / 45e9 + 7 * c.inter_lat, 1e-12);
}

/* Seed 000: DP all-reduces the gradients, 2(d-1)/d x 2P bytes in bf16. */
static void dp_gradient_allreduce_of_a_7b_model(void)
{
    ap_cluster c = ap_test_h100(8);
    double P = 7e9, d = 8;
    double t = ap_cost_allreduce(&c, 8, 1, 2 * P);
    CHECK_NEAR(t - 14 * c.intra_lat, 2 * (d - 1) / d * 2 * P / 360e9, 1e-12);
    CHECK_NEAR(t, 0.0680555 + 14 * 3.4e-6, 1e-4);
}

/* Gradients reduced in buckets: a 4 MiB bias gradient in a 64 MiB bucket
 * pays a sixteenth of the bucket's all-reduce, latency included; alone it
 * would pay the whole 14-hop latency for itself. Over 16 MiB of tensors the
 * bucket's latency is paid once between them. */
static void a_bucket_shares_its_latency_among_its_tensors(void)
{
    ap_cluster c = ap_test_h100(8);
    double mib = 1024.0 * 1024, alpha = 14 * c.intra_lat;
    double bucket = 64 * mib, beta = 2 * 7.0 / 8 / 360e9;
    CHECK_NEAR(ap_cost_collective_bucketed(&c, AP_COLL_ALLREDUCE, 8, 1, 4 * mib, bucket),
               (alpha + beta * bucket) / 16, 1e-15);
    double four = 4 * ap_cost_collective_bucketed(&c, AP_COLL_ALLREDUCE, 8, 1, 4 * mib, bucket);
    CHECK_NEAR(4 * ap_cost_allreduce(&c, 8, 1, 4 * mib) - four, 4 * alpha - alpha / 4, 1e-15);
    /* No bucket: the tensor's own collective. */
    CHECK_NEAR(ap_cost_collective_bucketed(&c, AP_COLL_ALLREDUCE, 8, 1, 4 * mib, 0),
               ap_cost_allreduce(&c, 8, 1, 4 * mib), 1e-15);
    CHECK(ap_cost_collective_bucketed(&c, AP_COLL_ALLREDUCE, 8, 1, 0, bucket) == 0);
}

/* Seed 000: EP dispatch moves bshk/d tokens' worth to each of the other
 * ranks; per all-to-all the buffer is b*s*h*k*2 bytes, of which (d-1)/d
 * leaves the GPU, and dispatch + combine give 2bshk(d-1)/d elements. */
static void ep_alltoall_volume_is_2bshk_over_d(void)
{
    ap_cluster c = ap_test_h100(8);
    double b = 4, s = 4096, h = 7168, k = 8, d = 8;
    double buffer = b * s * h * k * 2; /* bf16 bytes one rank sends in all */
    double both = 2 * ap_cost_alltoall(&c, 8, 1, buffer) - 2 * 7 * c.intra_lat;
    double elems = 2 * b * s * h * k * (d - 1) / d;
    CHECK_NEAR(both, elems * 2 / 360e9, 1e-12);
}

/* Seed 000: PP sends one bsh activation (2 bytes each) to the next stage. */
static void pp_sendrecv_of_an_activation(void)
{
    ap_cluster c = ap_test_h100(16);
    double b = 1, s = 4096, h = 8192;
    CHECK_NEAR(ap_cost_sendrecv(&c, 2, b * s * h * 2), b * s * h * 2 / 45e9 + 9.6e-6, 1e-12);
}

static ap_cluster with_samples(ap_coll_sample *s, int n)
{
    ap_cluster c = ap_test_h100(8);
    c.coll = s;
    c.ncoll = n;
    return c;
}

static void measured_table_returns_samples_and_interpolates(void)
{
    ap_coll_sample s[3] = {{AP_COLL_ALLREDUCE, 8, 1, 1 << 20, 3.0e-5},
                           {AP_COLL_ALLREDUCE, 8, 1, 1 << 30, 6.0e-3},
                           {AP_COLL_ALLREDUCE, 8, 1, 1 << 26, 4.0e-4}};
    ap_cluster c = with_samples(s, 3);
    CHECK_NEAR(ap_cost_allreduce(&c, 8, 1, 1 << 26), 4.0e-4, 1e-12);
    CHECK_NEAR(ap_cost_allreduce(&c, 8, 1, 1 << 30), 6.0e-3, 1e-12);
    /* 2^23 is halfway between 2^20 and 2^26 in log bytes: the geometric
     * mean of their times. */
    CHECK_NEAR(ap_cost_allreduce(&c, 8, 1, 1 << 23), sqrt(3.0e-5 * 4.0e-4), 1e-9);
    /* Below the table: clamped; above it: linear at the last busbw. */
    CHECK_NEAR(ap_cost_allreduce(&c, 8, 1, 1024), 3.0e-5, 1e-12);
    CHECK_NEAR(ap_cost_allreduce(&c, 8, 1, 4.0 * (1 << 30)), 4 * 6.0e-3, 1e-12);
    /* Other groups fall back to the analytic model. */
    ap_cluster a = ap_test_h100(8);
    CHECK_NEAR(ap_cost_allreduce(&c, 4, 1, 1 << 26), ap_cost_allreduce(&a, 4, 1, 1 << 26), 1e-12);
    CHECK_NEAR(ap_cost_allgather(&c, 8, 1, 1 << 26), ap_cost_allgather(&a, 8, 1, 1 << 26), 1e-12);
}

/* A message of a few bytes (an FP8 amax, a loss) runs on NCCL's LL protocol,
 * whose tuning model (src/graph/tuning.cc) gives the ring 3.6 us plus 0.47 us
 * a hop over NVLink and the tree 4.4 us plus 0.52 us a hop, hops within a
 * node 1.8 times slower once the group spans nodes, and each network level
 * of the tree 5.0 us; NCCL takes the faster. */
static void a_small_allreduce_takes_nccls_ll_latency(void)
{
    ap_cluster c = ap_test_h100(512);
    /* One node: the ring's 14 hops, 10.18 us (the tree's 14 take 11.68). */
    CHECK_NEAR(ap_cost_allreduce_small(&c, 8, 1, 4), 3.6e-6 + 14 * 0.47e-6, 1e-15);
    /* 2 nodes of 8: the tree climbs 7 hops and one network level, and back. */
    CHECK_NEAR(ap_cost_allreduce_small(&c, 16, 2, 4), 27.504e-6, 1e-12);
    /* 32 nodes of 8: five network levels, 67.5 us where the Simple ring's
     * 510 steps would take milliseconds. */
    CHECK_NEAR(ap_cost_allreduce_small(&c, 256, 32, 4096), 67.504e-6, 1e-12);
    CHECK(ap_cost_allreduce(&c, 256, 32, 4096) > 1e-3);
    CHECK(ap_cost_allreduce_small(&c, 1, 1, 4) == 0);
    /* A measured table for the group is read instead. */
    ap_coll_sample s[1] = {{AP_COLL_ALLREDUCE, 8, 1, 1 << 20, 3.0e-5}};
    ap_cluster m = with_samples(s, 1);
    CHECK_NEAR(ap_cost_allreduce_small(&m, 8, 1, 4), 3.0e-5, 1e-15);
    CHECK_NEAR(ap_cost_allreduce_small(&m, 16, 2, 4), 27.504e-6, 1e-12);
}

static void bus_factors_and_names(void)
{
    CHECK_NEAR(ap_coll_bus_factor(AP_COLL_ALLREDUCE, 4), 1.5, 1e-12);
    CHECK_NEAR(ap_coll_bus_factor(AP_COLL_ALLGATHER, 4), 0.75, 1e-12);
    CHECK(ap_coll_bus_factor(AP_COLL_ALLREDUCE, 1) == 0);
    CHECK(ap_coll_from_name("reduce_scatter") == AP_COLL_REDUCESCATTER);
    CHECK(ap_coll_from_name("allreduce") == -1);
    CHECK(!strcmp(ap_coll_name(AP_COLL_ALLTOALL), "all_to_all"));
}

int main(void)
{
    RUN(allreduce_matches_nccl_tests_busbw);
    RUN(gather_scatter_and_alltoall_move_half_an_allreduce);
    RUN(a_single_rank_costs_nothing);
    RUN(inter_node_groups_use_one_rail_per_gpu);
    RUN(dp_gradient_allreduce_of_a_7b_model);
    RUN(a_bucket_shares_its_latency_among_its_tensors);
    RUN(ep_alltoall_volume_is_2bshk_over_d);
    RUN(alltoall_across_nodes_leaves_through_each_ranks_own_rail);
    RUN(pp_sendrecv_of_an_activation);
    RUN(measured_table_returns_samples_and_interpolates);
    RUN(a_small_allreduce_takes_nccls_ll_latency);
    RUN(bus_factors_and_names);
    return DONE();
}
