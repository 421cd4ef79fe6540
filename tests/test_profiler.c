/* test_profiler.c -- the GPU-free half of `autopar profile`: what it
 * measures, how it reduces timings to numbers, and the file it writes. */
#include <unistd.h>

#include "model.h"
#include "profiler/profiler.h"

#ifdef AP_HAVE_PROFILER
#include <cuda_runtime.h>
#endif

#define KIB 1024.0
#define GIB (1024.0 * 1024.0 * 1024.0)
#define WITH_FP8 (AP_PROFILE_DTYPES_DEFAULT | AP_PROFILE_DTYPE(AP_FP8))

static int has_shape(const ap_profile_gemm_shape *g, int n, ap_dtype dt,
                     long m, long nn, long k)
{
    for (int i = 0; i < n; i++)
        if (g[i].dtype == dt && g[i].m == m && g[i].n == nn && g[i].k == k)
            return 1;
    return 0;
}

/* a before b in the grid's order within a dtype: by m, then n, then k. */
static int mnk_before(const ap_profile_gemm_shape *a, const ap_profile_gemm_shape *b)
{
    return a->m < b->m || (a->m == b->m && (a->n < b->n || (a->n == b->n && a->k < b->k)));
}

static void gemm_grid_covers_bf16_fp16_tf32_sorted_without_duplicates(void)
{
    ap_profile_gemm_shape *g;
    int n;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_profile_gemm_grid(0, AP_PROFILE_DTYPES_DEFAULT, &g, &n, err), err);
    CHECK(n > 0);
    CHECK(g[0].dtype == AP_BF16);
    CHECK(g[n - 1].dtype == AP_FP32);
    int seen[AP_NDTYPES] = {0};
    int ordered = 1;
    for (int i = 0; i < n; i++) {
        seen[g[i].dtype]++;
        if (i > 0 && g[i].dtype == g[i - 1].dtype) {
            ordered &= mnk_before(&g[i - 1], &g[i]); /* strictly: no duplicates either */
        }
    }
    CHECK(ordered);
    CHECK(seen[AP_BF16] > 0 && seen[AP_BF16] == seen[AP_FP16] &&
          seen[AP_FP16] == seen[AP_FP32]);
    CHECK(seen[AP_FP8] == 0 && seen[AP_INT32] == 0);
    CHECK_STR_HAS(ap_profile_gemm_dtype_name(AP_FP32), "tf32");
    free(g);
}

/* Hidden 4096 sharded 8 ways over 8192 tokens: the column-parallel QKV
 * (8192 x 1536 x 4096), its input gradient (8192 x 4096 x 1536) and weight
 * gradient (4096 x 1536 x 8192); hidden 16384 unsharded: the MLP up
 * projection 8192 x 65536 x 16384. */
static void gemm_grid_holds_the_tensor_parallel_shapes_of_a_layer(void)
{
    ap_profile_gemm_shape *g;
    int n;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_profile_gemm_grid(0, AP_PROFILE_DTYPES_DEFAULT, &g, &n, err), err);
    CHECK(has_shape(g, n, AP_BF16, 8192, 1536, 4096));
    CHECK(has_shape(g, n, AP_BF16, 8192, 4096, 1536));
    CHECK(has_shape(g, n, AP_BF16, 4096, 1536, 8192));
    CHECK(has_shape(g, n, AP_FP16, 8192, 65536, 16384));
    CHECK(has_shape(g, n, AP_FP32, 2048, 12288, 1536)); /* 12288 down proj, t=8 */
    CHECK(!has_shape(g, n, AP_BF16, 8192, 18432, 6144)); /* hidden 6144: not in the grid */
    for (int i = 0; i < n; i++)
        CHECK(g[i].m >= 512 && g[i].n >= 512 && g[i].k >= 512);
    free(g);
    REQUIRE_OK(ap_profile_gemm_grid(1, AP_PROFILE_DTYPES_DEFAULT, &g, &n, err), err);
    CHECK(has_shape(g, n, AP_BF16, 4096, 1536, 4096));
    free(g);
}

static int same_shape(const ap_profile_gemm_shape *a, const ap_profile_gemm_shape *b)
{
    return a->dtype == b->dtype && a->m == b->m && a->n == b->n && a->k == b->k;
}

/* Asked for FP8, the grid measures every bf16 shape again in FP8, after the
 * other dtypes; the rest of the grid is what it is without FP8. */
static void gemm_grid_with_fp8_repeats_the_bf16_shapes_last(void)
{
    char err[AP_ERR_LEN];
    for (int quick = 0; quick <= 1; quick++) {
        ap_profile_gemm_shape *g, *plain;
        int n, np;
        REQUIRE_OK(ap_profile_gemm_grid(quick, WITH_FP8, &g, &n, err), err);
        REQUIRE_OK(ap_profile_gemm_grid(quick, AP_PROFILE_DTYPES_DEFAULT, &plain, &np, err), err);
        int nbf16 = 0, nfp8 = 0, missing = 0, misplaced = 0;
        for (int i = 0; i < np; i++) {
            if (plain[i].dtype != AP_BF16)
                continue;
            nbf16++;
            missing += !has_shape(g, n, AP_FP8, plain[i].m, plain[i].n, plain[i].k);
        }
        for (int i = 0; i < n; i++) {
            nfp8 += g[i].dtype == AP_FP8;
            misplaced += i < np ? !same_shape(&g[i], &plain[i]) : g[i].dtype != AP_FP8;
        }
        CHECK(nbf16 > 0 && nfp8 == nbf16 && missing == 0);
        CHECK(n == np + nbf16 && misplaced == 0);
        CHECK(g[n - 1].dtype == AP_FP8 && g[n - nfp8 - 1].dtype == AP_FP32);
        for (int i = n - nfp8 + 1; i < n; i++)
            CHECK(mnk_before(&g[i - 1], &g[i]));
        free(g);
        free(plain);
    }
    CHECK_STR_HAS(ap_profile_gemm_dtype_name(AP_FP8), "fp8");
}

/* cuBLASLt runs FP8 only on dimensions that are multiples of 16; the grid
 * must never ask for another (4096 / 8 = 512, 3 x 12288 / 8 = 4608, ...). */
static void gemm_grid_dimensions_are_multiples_of_16(void)
{
    char err[AP_ERR_LEN];
    for (int quick = 0; quick <= 1; quick++) {
        ap_profile_gemm_shape *g;
        int n, bad = 0;
        REQUIRE_OK(ap_profile_gemm_grid(quick, WITH_FP8, &g, &n, err), err);
        for (int i = 0; i < n; i++)
            bad += g[i].m % 16 != 0 || g[i].n % 16 != 0 || g[i].k % 16 != 0;
        CHECK(n > 0 && bad == 0);
        free(g);
    }
}

/* FP8 tensor cores: Ada (8.9), Hopper (9.0), Blackwell (10.0, 12.0); not
 * Ampere (8.0, 8.6, 8.7), whose minor version is not below 9 by accident of
 * a major-times-ten comparison. */
static void fp8_needs_compute_capability_8_9(void)
{
    CHECK(ap_profile_has_fp8(8, 9));
    CHECK(ap_profile_has_fp8(9, 0));
    CHECK(ap_profile_has_fp8(10, 0));
    CHECK(ap_profile_has_fp8(12, 0));
    CHECK(!ap_profile_has_fp8(8, 0));
    CHECK(!ap_profile_has_fp8(8, 6));
    CHECK(!ap_profile_has_fp8(8, 7));
    CHECK(!ap_profile_has_fp8(7, 5));
}

/* E4M3: sign, 4 exponent bits with bias 7, 3 mantissa bits. 1.0 = 2^0 is
 * exponent 7 (0x38); 0.5 = 2^-1 is 6, with the sign 0xB0; 0.875 = 1.75 x
 * 2^-1 is 0x30 | 6; 2^-6 is the smallest normal (0x08), 2^-9 the smallest
 * subnormal (0x01), 448 = 1.75 x 2^8 the largest finite (0x7E). */
static void e4m3_encodes_known_values_exactly(void)
{
    CHECK(ap_profile_e4m3(1.0f) == 0x38);
    CHECK(ap_profile_e4m3(-0.5f) == 0xB0);
    CHECK(ap_profile_e4m3(0.875f) == 0x36);
    CHECK(ap_profile_e4m3(-1.0f) == 0xB8);
    CHECK(ap_profile_e4m3(0.0f) == 0x00);
    CHECK(ap_profile_e4m3(-0.0f) == 0x80);
    CHECK(ap_profile_e4m3(0x1p-6f) == 0x08);
    CHECK(ap_profile_e4m3(0x1p-9f) == 0x01);
    CHECK(ap_profile_e4m3(0x7p-9f) == 0x07);   /* 0.875 x 2^-6: the largest subnormal */
    CHECK(ap_profile_e4m3(448.0f) == 0x7E);
    CHECK(ap_profile_e4m3(-448.0f) == 0xFE);
}

/* Between representable values the nearest wins, ties to the even mantissa;
 * below 2^-9 is zero, above 448 saturates, and no input gives a NaN byte. */
static void e4m3_rounds_flushes_and_saturates(void)
{
    CHECK(ap_profile_e4m3(1.0625f) == 0x38);   /* 1 + 1/16: tie, to 1.0 */
    CHECK(ap_profile_e4m3(1.1875f) == 0x3A);   /* tie between 1.125 and 1.25: to 1.25 */
    CHECK(ap_profile_e4m3(1.07f) == 0x39);     /* nearer 1.125 */
    CHECK(ap_profile_e4m3(0.99f) == 0x38);     /* rounds up into the next binade */
    CHECK(ap_profile_e4m3(0x3p-10f) == 0x02);  /* 1.5 x 2^-9: tie, to 2 x 2^-9 */
    CHECK(ap_profile_e4m3(0x1.fp-10f) == 0x00); /* just below 2^-9 */
    CHECK(ap_profile_e4m3(-0x1p-12f) == 0x80);
    CHECK(ap_profile_e4m3(470.0f) == 0x7E);
    CHECK(ap_profile_e4m3(-1e30f) == 0xFE);
    CHECK(ap_profile_e4m3(INFINITY) == 0x7E);
    CHECK(ap_profile_e4m3(NAN) == 0x00);
    int nan_bytes = 0, above_one = 0;
    for (float f = -600.0f; f < 600.0f; f += 0.37f) {
        unsigned char b = ap_profile_e4m3(f);
        nan_bytes += (b & 0x7F) == 0x7F;
        above_one += fabsf(f) < 1.0f && (b & 0x7F) > 0x38;
    }
    CHECK(nan_bytes == 0);
    CHECK(above_one == 0); /* the operands' [-1, 1) stays within [-1, 1] */
}

static void collective_sizes_step_by_4_or_16_from_1k(void)
{
    double *s;
    int n;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_profile_coll_sizes(0, GIB, &s, &n, err), err);
    CHECK(n == 11);
    CHECK(s[0] == KIB && s[1] == 4 * KIB && s[n - 1] == GIB);
    free(s);
    REQUIRE_OK(ap_profile_coll_sizes(1, GIB, &s, &n, err), err);
    CHECK(n == 6);
    CHECK(s[1] == 16 * KIB && s[n - 1] == GIB);
    free(s);
    REQUIRE_OK(ap_profile_coll_sizes(0, 1024 * KIB, &s, &n, err), err);
    CHECK(n == 6 && s[5] == 1024 * KIB);
    free(s);
}

static void groups_are_powers_of_two_within_and_across_nodes(void)
{
    ap_profile_group *g;
    int n;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_profile_groups(1, 8, &g, &n, err), err);
    CHECK(n == 3);
    CHECK(g[0].nodes == 1 && g[0].per_node == 2 && g[2].per_node == 8);
    free(g);
    REQUIRE_OK(ap_profile_groups(4, 8, &g, &n, err), err);
    CHECK(n == 7);
    CHECK(g[3].nodes == 2 && g[3].per_node == 1);
    CHECK(g[4].nodes == 2 && g[4].per_node == 8);
    CHECK(g[6].nodes == 4 && ap_profile_group_ranks(g[6]) == 32);
    /* One GPU on each of two nodes of 8: global ranks 0 and 8. */
    CHECK(ap_profile_group_has(g[3], 8, 0));
    CHECK(ap_profile_group_has(g[3], 8, 8));
    CHECK(!ap_profile_group_has(g[3], 8, 1));
    CHECK(!ap_profile_group_has(g[3], 8, 16));
    free(g);
    REQUIRE_OK(ap_profile_groups(2, 1, &g, &n, err), err);
    CHECK(n == 1 && g[0].nodes == 2 && g[0].per_node == 1);
    free(g);
    CHECK(ap_profile_groups(0, 8, &g, &n, err) == AP_EINPUT);
}

static void median_and_percentiles_interpolate_like_numpy(void)
{
    double odd[] = {5, 1, 3};
    double even[] = {4, 1, 3, 2};
    double ten[] = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
    CHECK(ap_profile_median(odd, 3) == 3);
    CHECK(ap_profile_median(even, 4) == 2.5);
    CHECK_NEAR(ap_profile_percentile(ten, 10, 90), 9.1, 1e-12);
    CHECK_NEAR(ap_profile_percentile(ten, 10, 25), 3.25, 1e-12);
    CHECK(ap_profile_percentile(ten, 10, 0) == 1);
    CHECK(ap_profile_percentile(ten, 10, 100) == 10);
    CHECK(ten[0] == 10 && ten[9] == 1); /* the input is left alone */
    CHECK(isnan(ap_profile_median(odd, 0)));
}

/* nccl-tests doc/PERFORMANCE.md: all_reduce busbw = algbw * 2(n-1)/n;
 * all_gather, reduce_scatter, alltoall (n-1)/n; sendrecv 1. */
static void bus_bandwidth_follows_nccl_tests(void)
{
    CHECK(ap_profile_busbw_factor(AP_COLL_ALLREDUCE, 8) == 1.75);
    CHECK(ap_profile_busbw_factor(AP_COLL_ALLGATHER, 8) == 0.875);
    CHECK(ap_profile_busbw_factor(AP_COLL_REDUCESCATTER, 4) == 0.75);
    CHECK(ap_profile_busbw_factor(AP_COLL_ALLTOALL, 2) == 0.5);
    CHECK(ap_profile_busbw_factor(AP_COLL_SENDRECV, 2) == 1);
    CHECK(ap_profile_busbw_factor(AP_COLL_ALLREDUCE, 1) == 0);
    /* 1 GiB all-reduced on 8 GPUs in 4.5 ms: 238.6 GB/s algbw, 417.5 busbw. */
    CHECK_NEAR(ap_profile_algbw(GIB, 4.5e-3), 238.609e9, 1e-5);
    CHECK_NEAR(ap_profile_busbw(AP_COLL_ALLREDUCE, 8, GIB, 4.5e-3), 417.566e9, 1e-5);
    for (int op = 0; op < AP_NCOLL; op++)
        for (int n = 2; n <= 16; n++)
            CHECK_NEAR(ap_profile_busbw_factor((ap_coll)op, n),
                       ap_coll_bus_factor((ap_coll)op, n), 1e-15);
}

static void buffers_are_laid_out_as_nccl_tests_does(void)
{
    ap_profile_coll_shape s;
    CHECK(ap_profile_coll_shape_of(AP_COLL_ALLGATHER, 8, KIB, 4, &s));
    CHECK(s.send_count == 32 && s.recv_count == 256 && s.bytes == KIB);
    CHECK(ap_profile_coll_shape_of(AP_COLL_REDUCESCATTER, 8, KIB, 4, &s));
    CHECK(s.send_count == 256 && s.recv_count == 32 && s.bytes == KIB);
    CHECK(ap_profile_coll_shape_of(AP_COLL_ALLTOALL, 8, KIB, 4, &s));
    CHECK(s.send_count == 256 && s.peer_count == 32);
    CHECK(ap_profile_coll_shape_of(AP_COLL_ALLREDUCE, 8, 1000, 4, &s));
    CHECK(s.send_count == 250 && s.bytes == 1000);
    /* 250 floats do not split 8 ways: 31 per rank, 992 bytes gathered. */
    CHECK(ap_profile_coll_shape_of(AP_COLL_ALLGATHER, 8, 1000, 4, &s));
    CHECK(s.send_count == 31 && s.bytes == 992);
    CHECK(!ap_profile_coll_shape_of(AP_COLL_ALLGATHER, 8, 16, 4, &s));
    CHECK(ap_profile_coll_shape_of(AP_COLL_SENDRECV, 2, KIB, 4, &s));
    CHECK(s.send_count == 256 && s.recv_count == 256);
}

/* Samples of t = lat + f*B/bw for every size; other groups and ops must not
 * disturb the fit. */
static int synth(ap_coll_sample *s, int n, ap_coll op, int ranks, int nodes,
                 double bw, double lat)
{
    for (double b = KIB; b <= GIB; b *= 4)
        s[n++] = (ap_coll_sample){op, ranks, nodes, b,
                                  lat + ap_profile_busbw_factor(op, ranks) * b / bw};
    return n;
}

static void link_fit_recovers_alpha_and_beta(void)
{
    ap_coll_sample s[64];
    int n = 0;
    n = synth(s, n, AP_COLL_ALLREDUCE, 4, 1, 200e9, 9e-6);
    n = synth(s, n, AP_COLL_ALLREDUCE, 8, 1, 360e9, 12e-6);
    n = synth(s, n, AP_COLL_ALLGATHER, 8, 1, 100e9, 3e-6);
    n = synth(s, n, AP_COLL_ALLREDUCE, 16, 2, 45e9, 30e-6);
    ap_profile_link_fit f = {0};
    CHECK(ap_profile_fit_link(s, n, 0, &f));
    CHECK(f.ranks == 8 && f.nodes == 1);
    CHECK_NEAR(f.busbw, 360e9, 1e-9);
    CHECK_NEAR(f.alpha, 12e-6, 1e-9);
    CHECK(ap_profile_fit_link(s, n, 1, &f));
    CHECK(f.ranks == 16 && f.nodes == 2);
    CHECK_NEAR(f.busbw, 45e9, 1e-9);
    CHECK_NEAR(f.alpha, 30e-6, 1e-9);
    f.ranks = -1;
    CHECK(!ap_profile_fit_link(s, 8, 1, &f)); /* no inter-node samples */
    CHECK(f.ranks == -1);
}

/* With the tables removed, the cost model's analytic all-reduce must pass
 * through the measured smallest and largest messages, inside a node and
 * across two. */
static void fitted_links_make_the_analytic_model_agree(void)
{
    ap_profile_result r = {0};
    ap_cluster c;
    char err[AP_ERR_LEN];
    snprintf(r.gpu_name, sizeof r.gpu_name, "NVIDIA H100 80GB HBM3");
    r.nodes = 2;
    r.gpus_per_node = 8;
    r.coll = malloc(32 * sizeof *r.coll);
    r.ncoll = synth(r.coll, 0, AP_COLL_ALLREDUCE, 8, 1, 360e9, 20e-6);
    r.ncoll = synth(r.coll, r.ncoll, AP_COLL_ALLREDUCE, 16, 2, 40e9, 70e-6);
    REQUIRE_OK(ap_profile_build_cluster(&r, &c, err), err);
    ap_cluster bare = c;
    bare.ncoll = 0;
    bare.coll = NULL;
    for (int i = 0; i < r.ncoll; i++) {
        const ap_coll_sample *s = &r.coll[i];
        if (s->bytes == KIB || s->bytes == GIB)
            CHECK_NEAR(ap_cost_allreduce(&bare, s->ranks, s->nodes, s->bytes),
                       s->seconds, 1e-9);
    }
    ap_cluster_free(&c);
    ap_profile_result_free(&r);
}

static void gpu_names_map_to_presets(void)
{
    CHECK_STR_HAS(ap_profile_preset_for_gpu("NVIDIA H100 80GB HBM3"), "h100-sxm");
    CHECK_STR_HAS(ap_profile_preset_for_gpu("NVIDIA A100-SXM4-80GB"), "a100-80g");
    CHECK_STR_HAS(ap_profile_preset_for_gpu("NVIDIA A100-SXM4-40GB"), "a100-40g");
    CHECK_STR_HAS(ap_profile_preset_for_gpu("NVIDIA H200"), "h200");
    CHECK_STR_HAS(ap_profile_preset_for_gpu("NVIDIA GH200 480GB"), "h200");
    CHECK_STR_HAS(ap_profile_preset_for_gpu("NVIDIA H800"), "h800");
    CHECK_STR_HAS(ap_profile_preset_for_gpu("NVIDIA B200"), "b200");
    CHECK(ap_profile_preset_for_gpu("NVIDIA H20") == NULL);
    CHECK(ap_profile_preset_for_gpu("NVIDIA GeForce RTX 4090") == NULL);
    CHECK(ap_profile_preset_for_gpu(NULL) == NULL);
}

/* A profile of 8 H100s whose tables are synthetic: GEMMs at `tflops`, and
 * all-reduces on 8 GPUs at bus bandwidth `busbw` with no latency. */
static void fake_profile(ap_profile_result *r, double tflops, double busbw)
{
    memset(r, 0, sizeof *r);
    snprintf(r->gpu_name, sizeof r->gpu_name, "NVIDIA H100 80GB HBM3");
    r->hbm_bytes = 85520809984.0;
    r->sm_count = 132;
    r->nodes = 1;
    r->gpus_per_node = 8;
    r->hbm_bw = 2.9e12;
    snprintf(r->date, sizeof r->date, "2026-01-02T03:04:05Z");
    snprintf(r->command, sizeof r->command, "autopar profile --quick");
    r->gemm = malloc(3 * sizeof *r->gemm);
    r->ngemm = 3;
    for (int i = 0; i < 3; i++) {
        double d = 4096.0 * (1 << i);
        r->gemm[i] = (ap_gemm_sample){AP_BF16, d, d, d,
                                      ap_profile_gemm_flops(d, d, d) / (tflops * 1e12)};
    }
    r->coll = malloc(16 * sizeof *r->coll);
    r->ncoll = synth(r->coll, 0, AP_COLL_ALLREDUCE, 8, 1, busbw, 0);
}

static int write_and_load(const ap_profile_result *r, ap_cluster *out)
{
    ap_cluster c;
    char err[AP_ERR_LEN], path[64];
    int st = ap_profile_build_cluster(r, &c, err);
    CHECK(st == AP_OK);
    if (st != AP_OK)
        return st;
    char *text = ap_profile_cluster_json(&c, err);
    CHECK(text != NULL);
    snprintf(path, sizeof path, "/tmp/ap_test_profile_%d.json", (int)getpid());
    st = text ? ap_profile_write_file(path, text, err) : AP_EINTERNAL;
    CHECK(st == AP_OK);
    CHECK_STR_HAS(text, "\"hbm_bandwidth\"");
    CHECK_STR_HAS(text, "\"busbw\"");
    CHECK_STR_HAS(text, "autopar profile --quick");
    free(text);
    ap_cluster_free(&c);
    if (st == AP_OK) {
        st = ap_cluster_load(path, 0, 0, out, err);
        if (st != AP_OK)
            fprintf(stderr, "%s\n", err);
        CHECK(st == AP_OK);
    }
    remove(path);
    return st;
}

static void written_file_reads_back_with_identical_tables(void)
{
    ap_profile_result r;
    ap_cluster c;
    fake_profile(&r, 600, 300e9);
    if (write_and_load(&r, &c) != AP_OK) {
        ap_profile_result_free(&r);
        return;
    }
    CHECK(c.nodes == 1 && c.gpus_per_node == 8);
    CHECK(c.hbm_bytes == r.hbm_bytes);
    CHECK(c.sms == 132);
    CHECK(c.hbm_bw_measured == 2.9e12);
    CHECK_STR_HAS(c.gpu_name, "H100");
    CHECK_STR_HAS(c.measured_date, "2026-01-02");
    /* The file says how its GEMMs were timed, since its rate belongs to
     * that way of timing. */
    CHECK(!strcmp(c.measured_gemm_timing, AP_PROFILE_GEMM_TIMING));
    CHECK_STR_HAS(c.measured_gemm_timing, "cuBLASLt");
    CHECK(c.ngemm == r.ngemm && c.ncoll == r.ncoll);
    for (int i = 0; i < c.ngemm && i < r.ngemm; i++)
        CHECK(c.gemm[i].dtype == r.gemm[i].dtype && c.gemm[i].m == r.gemm[i].m &&
              c.gemm[i].n == r.gemm[i].n && c.gemm[i].k == r.gemm[i].k &&
              c.gemm[i].seconds == r.gemm[i].seconds);
    for (int i = 0; i < c.ncoll && i < r.ncoll; i++)
        CHECK(c.coll[i].op == r.coll[i].op && c.coll[i].ranks == r.coll[i].ranks &&
              c.coll[i].nodes == r.coll[i].nodes && c.coll[i].bytes == r.coll[i].bytes &&
              c.coll[i].seconds == r.coll[i].seconds);
    /* The links follow the measurement, so the analytic fallback agrees. */
    CHECK_NEAR(c.intra_bw, 300e9, 1e-9);
    CHECK(c.intra_lat < 1e-12);
    ap_cluster_free(&c);
    ap_profile_result_free(&r);
}

/* An all-reduce measured at half the preset's bus bandwidth doubles the
 * bandwidth term of a large all-reduce; GEMMs measured at 300 TFLOP/s take
 * flops / 300e12 at the rate of kernels run alone, and in a training step
 * that with its multiply over the profile's rate. */
static void measured_file_changes_the_cost_model(void)
{
    ap_cluster preset;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &preset, err), err);
    double big = 256 * 1024 * KIB;
    double before = 1.75 * big / preset.intra_bw;
    CHECK(ap_cost_allreduce(&preset, 8, 1, big) >= before);

    ap_profile_result r;
    ap_cluster c;
    fake_profile(&r, 300, preset.intra_bw / 2);
    if (write_and_load(&r, &c) == AP_OK) {
        CHECK_NEAR(ap_cost_allreduce(&c, 8, 1, big), 2 * before, 1e-6);
        double d = 8192;
        CHECK(c.calib_scale > 0.5 && c.calib_scale < 1);
        CHECK_NEAR(ap_cost_gemm(&c, AP_BF16, d, d, d),
                   ap_test_sample_at_rate(&c, AP_BF16, d, d, d, 2 * d * d * d / 300e12), 1e-12);
        CHECK(ap_cost_gemm(&c, AP_BF16, d, d, d) > 0.97 * 2 * d * d * d / 300e12 / c.calib_scale);
        CHECK(ap_cost_gemm(&preset, AP_BF16, d, d, d) < 2 * d * d * d / 300e12);
        ap_cluster_free(&c);
    }
    ap_profile_result_free(&r);
    ap_cluster_free(&preset);
}

/* FP8 samples in the file price FP8 GEMMs: at a measured shape, the measured
 * time (flops / 800 TFLOP/s), its multiply over the profile's rate, as
 * bf16 samples are;
 * bf16 GEMMs keep the price the bf16 samples alone give them. */
static void measured_fp8_samples_price_fp8_gemms_only(void)
{
    ap_profile_result r;
    ap_cluster plain, with_fp8;
    fake_profile(&r, 300, 300e9);
    if (write_and_load(&r, &plain) != AP_OK) {
        ap_profile_result_free(&r);
        return;
    }
    ap_gemm_sample *g = realloc(r.gemm, 6 * sizeof *g);
    if (!g) {
        CHECK(!"out of memory");
        ap_cluster_free(&plain);
        ap_profile_result_free(&r);
        return;
    }
    r.gemm = g;
    for (int i = 0; i < 3; i++) {
        double d = 4096.0 * (1 << i);
        g[3 + i] = (ap_gemm_sample){AP_FP8, d, d, d,
                                    ap_profile_gemm_flops(d, d, d) / 800e12};
    }
    r.ngemm = 6;
    double d = 8192, flops = 2 * d * d * d;
    double before = ap_cost_gemm(&plain, AP_FP8, d, d, d);
    if (write_and_load(&r, &with_fp8) == AP_OK) {
        double rate = with_fp8.calib_scale;
        CHECK(rate > 0.5 && rate <= 1 && rate == plain.calib_scale);
        CHECK(with_fp8.ngemm == 6 && with_fp8.gemm[5].dtype == AP_FP8);
        double fp8 = ap_test_sample_at_rate(&with_fp8, AP_FP8, d, d, d, flops / 800e12);
        CHECK_NEAR(ap_cost_gemm(&with_fp8, AP_FP8, d, d, d), fp8, 1e-12);
        CHECK(fabs(before - fp8) > 1e-3 * before);
        for (double m = 2048; m <= 65536; m *= 2)
            CHECK(ap_cost_gemm(&with_fp8, AP_BF16, m, d, 3 * d) ==
                  ap_cost_gemm(&plain, AP_BF16, m, d, 3 * d));
        CHECK_NEAR(ap_cost_gemm(&with_fp8, AP_BF16, d, d, d),
                   ap_test_sample_at_rate(&with_fp8, AP_BF16, d, d, d, flops / 300e12), 1e-12);
        ap_cluster_free(&with_fp8);
    }
    ap_cluster_free(&plain);
    ap_profile_result_free(&r);
}

/* An unknown GPU keeps h100-sxm's ratios, scaled so that its bf16 roofline
 * at the kernel figures (before the profile's rate) is the best GEMM
 * measured. */
static void unknown_gpu_is_scaled_to_its_measured_peak(void)
{
    ap_profile_result r;
    ap_cluster c;
    char err[AP_ERR_LEN];
    fake_profile(&r, 150, 100e9);
    snprintf(r.gpu_name, sizeof r.gpu_name, "NVIDIA RTX 6000 Ada Generation");
    REQUIRE_OK(ap_profile_build_cluster(&r, &c, err), err);
    CHECK_NEAR(c.peak_flops[AP_BF16] * c.gemm_eff / c.calib_scale, 150e12, 1e-9);
    CHECK_STR_HAS(c.name, "RTX 6000");
    ap_cluster_free(&c);
    ap_profile_result_free(&r);
}

static int parse(const char *line, ap_profile_options *o, char *err)
{
    char buf[256], *argv[16];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *t = strtok(buf, " "); t && argc < 16; t = strtok(NULL, " "))
        argv[argc++] = t;
    return ap_profile_parse_args(argc, argv, o, err);
}

static void options_default_and_reject_bad_values(void)
{
    ap_profile_options o;
    char err[AP_ERR_LEN];
    CHECK(parse("", &o, err) == AP_OK);
    CHECK(!strcmp(o.out, "cluster.json") && o.iters == 20 && o.warmup == 5);
    CHECK(o.max_bytes == GIB && o.gpus == 0 && !o.quick && !o.mpi);
    CHECK(parse("--quick -o x.json --gpus 4", &o, err) == AP_OK);
    CHECK(o.quick && o.iters == 10 && o.warmup == 3 && o.gpus == 4);
    CHECK(!strcmp(o.out, "x.json"));
    CHECK(!strcmp(o.command, "autopar profile --quick -o x.json --gpus 4"));
    /* The cluster reader refuses control characters in the command it
     * records, so an argument's are written as '?'. */
    char *nl[] = {"-o", "a\nb.json"};
    CHECK(ap_profile_parse_args(2, nl, &o, err) == AP_OK);
    CHECK(!strcmp(o.command, "autopar profile -o a?b.json"));
    CHECK(parse("--quick --iters 7 --max-bytes 256M --mpi", &o, err) == AP_OK);
    CHECK(o.iters == 7 && o.max_bytes == 256 * 1024 * KIB && o.mpi);
    CHECK(parse("--iters 0", &o, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--iters");
    CHECK(parse("--max-bytes 12X", &o, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--max-bytes");
    CHECK(parse("--gpus", &o, err) == AP_EINPUT);
    CHECK(parse("-o", &o, err) == AP_EINPUT);
    CHECK(parse("--fast", &o, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "unknown option \"--fast\"");
    CHECK(parse("--help", &o, err) == AP_OK && o.help);
}

/* --dtypes narrows the GEMM grid to the dtypes a user trains in: names
 * bf16, fp16, tf32 (or fp32, the inputs' type) and fp8, comma-separated.
 * Without it a run measures bf16, fp16 and TF32, and FP8 where the GPU
 * has FP8 tensor cores; asked for FP8 on a GPU without them, the run is
 * refused, naming the option. */
/* Before it measures, a run says what it will measure and about how long
 * it takes, by the estimate with the GPU's preset: --quick on one H100 is
 * 308 GEMMs in four dtypes and no collectives (19.5 s measured on
 * 2026-11-27, docs/profiler.md); on 8 GPUs, group sizes 2, 4 and 8. An
 * A100 has no FP8, and is priced with its own preset. */
static void a_run_describes_itself_before_it_starts(void)
{
    ap_profile_options o;
    char buf[256], err[AP_ERR_LEN];
    CHECK(parse("--quick", &o, err) == AP_OK);
    REQUIRE_OK(ap_profile_describe(&o, "NVIDIA H100 80GB HBM3", 1, 1, buf, sizeof buf, err),
               err);
    CHECK_STR_HAS(buf, "308 GEMMs (bf16, fp16, tf32, fp8) and 0 collectives; about ");
    CHECK_STR_HAS(buf, "s by the h100-sxm preset's figures");
    double t = atof(strstr(buf, "about ") + 6);
    CHECK(t > 12 && t < 25);
    /* 16 sizes of 1K..1G in steps of 16 (quick): 6; four ops at 4 and 8,
     * five with send/recv at 2. */
    REQUIRE_OK(ap_profile_describe(&o, "NVIDIA H100 80GB HBM3", 1, 8, buf, sizeof buf, err),
               err);
    double *sizes;
    int ns;
    REQUIRE_OK(ap_profile_coll_sizes(1, o.max_bytes, &sizes, &ns, err), err);
    free(sizes);
    char want[64];
    snprintf(want, sizeof want, "and %d collectives", ns * (AP_NCOLL + 2 * (AP_NCOLL - 1)));
    CHECK_STR_HAS(buf, want);
    REQUIRE_OK(ap_profile_describe(&o, "NVIDIA A100-SXM4-80GB", 0, 1, buf, sizeof buf, err),
               err);
    CHECK_STR_HAS(buf, "231 GEMMs (bf16, fp16, tf32)");
    CHECK_STR_HAS(buf, "a100-80g preset");
    CHECK(parse("--quick --dtypes fp8", &o, err) == AP_OK);
    CHECK(ap_profile_describe(&o, "NVIDIA A100-SXM4-80GB", 0, 1, buf, sizeof buf, err) ==
          AP_EINPUT);
    CHECK(parse("--dtypes bf16", &o, err) == AP_OK);
    REQUIRE_OK(ap_profile_describe(&o, "Some Future GPU", 1, 1, buf, sizeof buf, err), err);
    CHECK_STR_HAS(buf, "305 GEMMs (bf16)");
    CHECK_STR_HAS(buf, "h100-sxm preset");
}

static void dtypes_option_narrows_the_grid(void)
{
    ap_profile_options o;
    unsigned d;
    char err[AP_ERR_LEN];
    CHECK(parse("", &o, err) == AP_OK && o.dtypes == 0);
    REQUIRE_OK(ap_profile_run_dtypes(&o, 1, &d, err), err);
    CHECK(d == WITH_FP8);
    REQUIRE_OK(ap_profile_run_dtypes(&o, 0, &d, err), err);
    CHECK(d == AP_PROFILE_DTYPES_DEFAULT);
    CHECK(parse("--dtypes bf16,fp8", &o, err) == AP_OK);
    CHECK(o.dtypes == (AP_PROFILE_DTYPE(AP_BF16) | AP_PROFILE_DTYPE(AP_FP8)));
    REQUIRE_OK(ap_profile_run_dtypes(&o, 1, &d, err), err);
    CHECK(d == o.dtypes);
    CHECK(ap_profile_run_dtypes(&o, 0, &d, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--dtypes fp8: this GPU has no FP8 tensor cores");
    CHECK(parse("--dtypes fp32", &o, err) == AP_OK && o.dtypes == AP_PROFILE_DTYPE(AP_FP32));
    CHECK(parse("--dtypes tf32,tf32", &o, err) == AP_OK && o.dtypes == AP_PROFILE_DTYPE(AP_FP32));
    CHECK(parse("--dtypes bf16,int8", &o, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--dtypes: unknown dtype \"int8\" (bf16, fp16, tf32, fp8)");
    CHECK(parse("--dtypes bf16,", &o, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "unknown dtype \"\"");
    CHECK(parse("--dtypes", &o, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "--dtypes: expected a comma-separated list");

    /* The grid holds the named dtypes' shapes and no others, each dtype's
     * as many as in the full grid: bf16 and fp8 are 2 of its 4 dtypes. */
    ap_profile_gemm_shape *all, *two;
    int nall, ntwo, other = 0;
    REQUIRE_OK(ap_profile_gemm_grid(0, WITH_FP8, &all, &nall, err), err);
    REQUIRE_OK(ap_profile_gemm_grid(0, AP_PROFILE_DTYPE(AP_BF16) | AP_PROFILE_DTYPE(AP_FP8),
                                    &two, &ntwo, err), err);
    for (int i = 0; i < ntwo; i++)
        other += two[i].dtype != AP_BF16 && two[i].dtype != AP_FP8;
    CHECK(ntwo * 2 == nall && other == 0);
    CHECK(two[0].dtype == AP_BF16 && two[ntwo - 1].dtype == AP_FP8);
    free(all);
    free(two);

    /* The time estimate prices only what is measured: bf16 alone on
     * 8 x H100 is under a third of the default run's GEMMs. */
    ap_cluster c;
    ap_profile_options full, bf16;
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    CHECK(parse("--max-bytes 1K", &full, err) == AP_OK);
    CHECK(parse("--max-bytes 1K --dtypes bf16", &bf16, err) == AP_OK);
    double t_full = ap_profile_estimate_seconds(&full, &c, 1);
    double t_bf16 = ap_profile_estimate_seconds(&bf16, &c, 1);
    CHECK(t_bf16 > 0 && t_bf16 < t_full / 3);
    ap_cluster_free(&c);
}

/* A GEMM sample is many launches back to back, so that a short GEMM is
 * timed as a training step runs it (not after an idle queue) and on
 * operands it has not just read (not from L2). */
static void short_gemms_are_timed_in_batches_over_fresh_operands(void)
{
    /* 37 us: 28 launches make a millisecond; 8 MiB operands, 64 fit a 512 MiB
     * buffer, so each launch of the batch reads its own. */
    ap_profile_batch b = ap_profile_gemm_batch(37e-6, 8u << 20, 512u << 20);
    CHECK(b.reps == 28 && b.slots == 28 && b.stride == (8u << 20));
    /* Tiny GEMMs stop at 64 launches; a buffer that holds 5 sets cycles over 5. */
    b = ap_profile_gemm_batch(2e-6, 100u << 20, 512u << 20);
    CHECK(b.reps == AP_PROFILE_MAX_REPS && b.slots == 5);
    CHECK(b.stride == (100u << 20));
    /* Strides keep 256-byte alignment for cuBLAS. */
    b = ap_profile_gemm_batch(2e-6, 1000, 1u << 20);
    CHECK(b.stride == 1024 && b.slots == AP_PROFILE_MAX_REPS);
    /* A millisecond or more is timed alone, as is an operand the buffer holds once. */
    b = ap_profile_gemm_batch(1.5e-3, 8u << 20, 512u << 20);
    CHECK(b.reps == 1 && b.slots == 1);
    b = ap_profile_gemm_batch(37e-6, 512u << 20, 512u << 20);
    CHECK(b.reps == 28 && b.slots == 1);
    b = ap_profile_gemm_batch(0, 8u << 20, 512u << 20);
    CHECK(b.reps == 1 && b.slots == 1);
}

/* The budgets of the issue: --quick under 2 minutes and a full run under 15
 * on an 8-GPU H100 node, by the roofline and alpha-beta estimate. */
static void default_grids_fit_their_time_budgets(void)
{
    ap_cluster c;
    ap_profile_options quick, full;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 8, 8, &c, err), err);
    CHECK(parse("--quick", &quick, err) == AP_OK);
    CHECK(parse("", &full, err) == AP_OK);
    double tq = ap_profile_estimate_seconds(&quick, &c, 8);
    double tf = ap_profile_estimate_seconds(&full, &c, 8);
    CHECK(tq > 10 && tq < 120);
    CHECK(tf > tq && tf < 900);
    /* The FP8 shapes are priced when the GPU has an FP8 peak, and cost less
     * than the bf16 ones at twice the peak. */
    c.peak_flops[AP_FP8] = 0;
    double tq_no_fp8 = ap_profile_estimate_seconds(&quick, &c, 8);
    double tf_no_fp8 = ap_profile_estimate_seconds(&full, &c, 8);
    printf("estimated on 8 x h100-sxm: --quick %.0f s, full %.0f s "
           "(without the FP8 GEMMs %.0f s, %.0f s)\n", tq, tf, tq_no_fp8, tf_no_fp8);
    CHECK(tq > tq_no_fp8 && tf > tf_no_fp8);
    c.peak_flops[AP_BF16] = 0;
    double tf_no_bf16 = ap_profile_estimate_seconds(&full, &c, 8);
    CHECK(tf - tf_no_fp8 < tf_no_fp8 - tf_no_bf16);
    ap_cluster_free(&c);
}

#ifdef AP_HAVE_PROFILER
/* Without a device the run must say so and fail with AP_EINPUT; with one, a
 * tiny run on one GPU must write a file that loads with the quick grid. */
static void run_reports_a_missing_device_or_profiles_one(void)
{
    ap_profile_options o;
    char err[AP_ERR_LEN], line[256];
    int count = 0;
    snprintf(line, sizeof line,
             "--gpus 1 --quick --iters 2 --warmup 1 --max-bytes 64K -o /tmp/ap_test_run_%d.json",
             (int)getpid());
    CHECK(parse(line, &o, err) == AP_OK);
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        CHECK(ap_profile_run(&o, err) == AP_EINPUT);
        CHECK_STR_HAS(err, "no CUDA device found: ");
        return;
    }
    REQUIRE_OK(ap_profile_run(&o, err), err);
    ap_cluster c;
    ap_profile_gemm_shape *g;
    struct cudaDeviceProp p;
    int n;
    REQUIRE_OK(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
    unsigned dtypes = ap_profile_has_fp8(p.major, p.minor) ? WITH_FP8 : AP_PROFILE_DTYPES_DEFAULT;
    REQUIRE_OK(ap_profile_gemm_grid(1, dtypes, &g, &n, err), err);
    free(g);
    if (ap_cluster_load(o.out, 0, 0, &c, err) == AP_OK) {
        CHECK(c.ngemm == n);
        CHECK(c.hbm_bw_measured > 0);
        CHECK(c.gpu_name[0] != 0);
        ap_cluster_free(&c);
    } else {
        CHECK(!"the profile did not load");
    }
    remove(o.out);
}
#endif

int main(void)
{
    RUN(gemm_grid_covers_bf16_fp16_tf32_sorted_without_duplicates);
    RUN(gemm_grid_holds_the_tensor_parallel_shapes_of_a_layer);
    RUN(gemm_grid_with_fp8_repeats_the_bf16_shapes_last);
    RUN(gemm_grid_dimensions_are_multiples_of_16);
    RUN(fp8_needs_compute_capability_8_9);
    RUN(e4m3_encodes_known_values_exactly);
    RUN(e4m3_rounds_flushes_and_saturates);
    RUN(collective_sizes_step_by_4_or_16_from_1k);
    RUN(groups_are_powers_of_two_within_and_across_nodes);
    RUN(median_and_percentiles_interpolate_like_numpy);
    RUN(bus_bandwidth_follows_nccl_tests);
    RUN(buffers_are_laid_out_as_nccl_tests_does);
    RUN(link_fit_recovers_alpha_and_beta);
    RUN(fitted_links_make_the_analytic_model_agree);
    RUN(gpu_names_map_to_presets);
    RUN(written_file_reads_back_with_identical_tables);
    RUN(measured_file_changes_the_cost_model);
    RUN(measured_fp8_samples_price_fp8_gemms_only);
    RUN(unknown_gpu_is_scaled_to_its_measured_peak);
    RUN(options_default_and_reject_bad_values);
    RUN(dtypes_option_narrows_the_grid);
    RUN(a_run_describes_itself_before_it_starts);
    RUN(short_gemms_are_timed_in_batches_over_fresh_operands);
    RUN(default_grids_fit_their_time_budgets);
#ifdef AP_HAVE_PROFILER
    RUN(run_reports_a_missing_device_or_profiles_one);
#endif
    return DONE();
}
