/* test_cost_cluster.c -- presets, cluster files and their validation. */
#include <dirent.h>

#include "costmodel/costmodel.h"
#include "test.h"

static void h100_preset_has_datasheet_numbers(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 0, 0, &c, err), err);
    CHECK_NEAR(c.peak_flops[AP_BF16], 989.4e12, 1e-12);
    CHECK_NEAR(c.peak_flops[AP_FP8], 2 * 989.45e12, 1e-3);
    CHECK_NEAR(c.hbm_bw, 3.35e12, 1e-12);
    CHECK(c.sms == 132);
    CHECK(ap_cluster_gpus(&c) == 8);
    /* 400 Gb/s NDR is 50 GB/s per rail, 90% achievable. */
    CHECK_NEAR(c.inter_bw, 45e9, 1e-12);
    CHECK_NEAR(ap_cluster_usable_bytes(&c), c.hbm_bytes - c.mem_reserved, 1e-12);
    CHECK(c.mem_reserved > 1e9 && c.mem_reserved < 0.1 * c.hbm_bytes);
    ap_cluster_free(&c);
}

static void every_preset_loads_with_sane_numbers(void)
{
    const char *names[] = {"a100-80g", "a100-40g", "h100-sxm", "h200", "b200", "h800"};
    for (int i = 0; i < 6; i++) {
        ap_cluster c;
        char err[AP_ERR_LEN];
        REQUIRE_OK(ap_cluster_preset(names[i], 16, 0, &c, err), err);
        CHECK(c.nodes == 2 && c.gpus_per_node == 8);
        CHECK(c.intra_bw > c.inter_bw);
        CHECK(c.gemm_eff > 0.5 && c.gemm_eff < 1);
        CHECK_STR_HAS(ap_cluster_preset_names(), names[i]);
        ap_cluster_free(&c);
    }
}

/* The 40GB A100 is the 80GB one with HBM2 instead of HBM2e: the
 * 42,505,273,344 bytes CUDA's device query reports (39.59 GiB) and
 * 1,555 GB/s, everything else the same. */
static void a100_40g_is_the_80g_with_less_and_slower_memory(void)
{
    ap_cluster a40, a80;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("a100-40g", 0, 0, &a40, err), err);
    REQUIRE_OK(ap_cluster_preset("a100-80g", 0, 0, &a80, err), err);
    CHECK(a40.hbm_bytes == 42505273344.0);
    CHECK(a40.hbm_bw == 1.555e12 && a80.hbm_bw == 2.039e12);
    CHECK(a40.peak_flops[AP_BF16] == a80.peak_flops[AP_BF16]);
    CHECK(a40.gemm_eff == a80.gemm_eff && a40.calib_scale == a80.calib_scale);
    CHECK(a40.intra_bw == a80.intra_bw && a40.inter_bw == a80.inter_bw);
    CHECK_STR_HAS(a40.gpu_name, "A100-SXM4-40GB");
    ap_cluster_free(&a40);
    ap_cluster_free(&a80);
}

static void h800_nvlink_is_the_deepseek_figure(void)
{
    ap_cluster h800, h100;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("h800", 0, 0, &h800, err), err);
    REQUIRE_OK(ap_cluster_preset("h100-sxm", 0, 0, &h100, err), err);
    CHECK_NEAR(h800.intra_bw, 160e9, 1e-12);
    CHECK_NEAR(h800.peak_flops[AP_BF16], h100.peak_flops[AP_BF16], 1e-12);
}

static void sizing_fills_whole_nodes_or_fails(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(ap_cluster_preset("a100-80g", 4, 0, &c, err), err);
    CHECK(c.nodes == 1 && c.gpus_per_node == 4);
    REQUIRE_OK(ap_cluster_preset("a100-80g", 64, 4, &c, err), err);
    CHECK(c.nodes == 16 && c.gpus_per_node == 4);
    CHECK(ap_cluster_preset("a100-80g", 12, 0, &c, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "whole nodes");
    CHECK(ap_cluster_preset("a100-80g", -1, 0, &c, err) == AP_EINPUT);
    CHECK(ap_cluster_preset("v100", 8, 0, &c, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "h100-sxm");
}

static void same_cluster(const ap_cluster *a, const ap_cluster *b)
{
    CHECK(!strcmp(a->name, b->name));
    CHECK(!strcmp(a->gpu_name, b->gpu_name));
    CHECK(a->nodes == b->nodes && a->gpus_per_node == b->gpus_per_node);
    CHECK(a->sms == b->sms && a->tile_m == b->tile_m && a->tile_n == b->tile_n);
    for (int i = 0; i < AP_NDTYPES; i++)
        CHECK(a->peak_flops[i] == b->peak_flops[i]);
    CHECK(a->gemm_eff == b->gemm_eff && a->attn_eff == b->attn_eff);
    CHECK(a->gemm_eff_fp8 == b->gemm_eff_fp8 && a->attn_bwd_eff == b->attn_bwd_eff);
    CHECK(a->hbm_bytes == b->hbm_bytes && a->mem_reserved == b->mem_reserved);
    CHECK(a->hbm_bw == b->hbm_bw && a->hbm_eff == b->hbm_eff);
    CHECK(a->hbm_bw_measured == b->hbm_bw_measured);
    CHECK(a->kernel_floor == b->kernel_floor);
    CHECK(a->intra_bw == b->intra_bw && a->intra_lat == b->intra_lat);
    CHECK(a->inter_bw == b->inter_bw && a->inter_lat == b->inter_lat);
    CHECK(a->has_measured == b->has_measured);
    CHECK(!strcmp(a->measured_date, b->measured_date));
    CHECK(!strcmp(a->measured_command, b->measured_command));
    CHECK(!strcmp(a->measured_gemm_timing, b->measured_gemm_timing));
    CHECK(a->attn_len_n == b->attn_len_n);
    for (int i = 0; i < a->attn_len_n && i < b->attn_len_n; i++) {
        CHECK(a->attn_len[i] == b->attn_len[i]);
        CHECK(a->attn_len_causal[i] == b->attn_len_causal[i]);
        CHECK(a->attn_len_noncausal[i] == b->attn_len_noncausal[i]);
        CHECK(a->attn_len_bwd[i] == b->attn_len_bwd[i]);
    }
    CHECK(a->ngemm == b->ngemm && a->ncoll == b->ncoll);
    for (int i = 0; i < a->ngemm && i < b->ngemm; i++)
        CHECK(!memcmp(&a->gemm[i], &b->gemm[i], sizeof a->gemm[i]));
    for (int i = 0; i < a->ncoll && i < b->ncoll; i++)
        CHECK(!memcmp(&a->coll[i], &b->coll[i], sizeof a->coll[i]));
}

/* load(to_json(c)) == c, through a file as the profiler would write it. */
static void round_trip(const ap_cluster *c)
{
    char path[] = "/tmp/ap_cluster_XXXXXX";
    char err[AP_ERR_LEN];
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    char *text = ap_cluster_to_json(c);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    ap_cluster back;
    int rc = ap_cluster_load(path, 0, 0, &back, err);
    CHECK(rc == AP_OK);
    if (rc != AP_OK)
        fprintf(stderr, "%s\n", err);
    else
        same_cluster(c, &back);
    ap_cluster_free(&back);
    remove(path);
}

static void presets_round_trip_through_files(void)
{
    const char *names[] = {"a100-80g", "a100-40g", "h100-sxm", "h200", "b200", "h800"};
    for (int i = 0; i < 6; i++) {
        ap_cluster c;
        char err[AP_ERR_LEN];
        REQUIRE_OK(ap_cluster_preset(names[i], 32, 0, &c, err), err);
        round_trip(&c);
    }
}

static void measured_file_round_trips_and_overrides_hbm(void)
{
    char path[512], err[AP_ERR_LEN];
    snprintf(path, sizeof path, "%s/examples/clusters/synthetic-measured.json",
             ap_test_src());
    ap_cluster c;
    REQUIRE_OK(ap_cluster_load(path, 0, 0, &c, err), err);
    CHECK(c.ngemm == 4 && c.ncoll == 5);
    CHECK(c.coll[3].op == AP_COLL_ALLGATHER);
    /* The measured 3.0 TB/s replaces 3.35 TB/s x 0.9. */
    CHECK_NEAR(ap_cluster_hbm_bw(&c), 3.0e12, 1e-12);
    round_trip(&c);
    ap_cluster_free(&c);
}

static void file_counts_can_be_overridden(void)
{
    char path[512], err[AP_ERR_LEN];
    snprintf(path, sizeof path, "%s/examples/clusters/h100-2node.json", ap_test_src());
    ap_cluster c;
    REQUIRE_OK(ap_cluster_load(path, 0, 0, &c, err), err);
    CHECK(ap_cluster_gpus(&c) == 16);
    REQUIRE_OK(ap_cluster_load(path, 64, 0, &c, err), err);
    CHECK(c.nodes == 8);
    REQUIRE_OK(ap_cluster_resolve(path, 0, 0, &c, err), err);
    CHECK(!strcmp(c.name, "h100-sxm-2node"));
    REQUIRE_OK(ap_cluster_resolve("h200", 0, 0, &c, err), err);
    CHECK(!strcmp(c.name, "h200"));
    CHECK(ap_cluster_resolve("no-such-gpu", 0, 0, &c, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "unknown cluster preset");
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static void read_expect(const char *path, char *out, size_t cap)
{
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(out, (int)cap, f))
        out[strcspn(out, "\n")] = 0;
    fclose(f);
}

static void every_bad_cluster_file_is_rejected_with_its_message(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/data/bad", ap_test_src());
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d)
        return;
    int seen = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "cluster_", 8) || !ends_with(e->d_name, ".json"))
            continue;
        char path[1024], expect_path[1024], expect[256], err[AP_ERR_LEN] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(expect_path, sizeof expect_path, "%.*s.expect",
                 (int)strlen(path) - 5, path);
        read_expect(expect_path, expect, sizeof expect);
        CHECK(expect[0] != 0);
        ap_cluster c;
        int rc = ap_cluster_load(path, 0, 0, &c, err);
        CHECK(rc == AP_EINPUT);
        CHECK_STR_HAS(err, expect);
        CHECK_STR_HAS(err, e->d_name);
        if (rc == AP_OK)
            ap_cluster_free(&c);
        seen++;
    }
    closedir(d);
    CHECK(seen >= 10);
}

/* A cluster file whose gpu object ends with `curve` (a field, or ""). */
static int parse_curve(const char *curve, ap_cluster *c, char *err)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"format\": \"autopar-cluster/1\", \"name\": \"t\", \"nodes\": 1,"
             " \"gpus_per_node\": 8, \"gpu\": {\"name\": \"H100\", \"sms\": 132,"
             " \"memory_bytes\": 85520809984, \"reserved_bytes\": 5349782323,"
             " \"hbm_bandwidth\": 3.35e12, \"hbm_efficiency\": 0.9,"
             " \"gemm_efficiency\": 0.75, \"attention_efficiency\": 0.5,"
             " \"kernel_floor_s\": 4e-6, \"peak_flops\": {\"bf16\": 1e15,"
             " \"fp16\": 1e15, \"fp32\": 5e14}%s},"
             " \"links\": {\"intra\": {\"bandwidth\": 3.6e11, \"latency_s\": 3.4e-6},"
             " \"inter\": {\"bandwidth\": 4.5e10, \"latency_s\": 9.6e-6}}}",
             curve);
    return ap_cluster_parse(text, strlen(text), "cluster.json", 0, 0, c, err);
}

#define CURVE(lengths, causal, noncausal, backward)                            \
    ", \"attention_by_length\": {\"lengths\": " lengths                        \
    ", \"forward_causal\": " causal ", \"forward_noncausal\": " noncausal     \
    ", \"backward\": " backward "}"

/* A hand-written curve is read as written, prices by it (a 1k causal
 * forward at half of attention_efficiency: 0.25 of the 1e15 peak), and is
 * written back so that it round-trips. */
static void a_length_curve_is_read_priced_and_round_trips(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    REQUIRE_OK(parse_curve(CURVE("[1024, 4096]", "[0.5, 1]", "[1, 2]", "[0.25, 1]"), &c,
                           err),
               err);
    CHECK(c.attn_len_n == 2 && c.attn_len[1] == 4096 && c.attn_len_noncausal[1] == 2);
    double bn = 1024, t = 1024, d = 128;
    CHECK_NEAR(ap_cost_attention(&c, AP_BF16, bn, t, t, d, d, 1),
               2 * bn * t * t * d / (1e15 * 0.25), 1e-12);
    char *text = ap_cluster_to_json(&c);
    CHECK_STR_HAS(text, "\"attention_by_length\"");
    ap_cluster back;
    REQUIRE_OK(ap_cluster_parse(text, strlen(text), "rt.json", 0, 0, &back, err), err);
    same_cluster(&c, &back);
    free(text);
    ap_cluster_free(&back);
    ap_cluster_free(&c);

    /* Without the field, none is read and none written. */
    REQUIRE_OK(parse_curve("", &c, err), err);
    CHECK(c.attn_len_n == 0);
    text = ap_cluster_to_json(&c);
    CHECK(!strstr(text, "attention_by_length"));
    free(text);
    ap_cluster_free(&c);
}

static void a_bad_length_curve_is_refused_naming_its_field(void)
{
    static const struct {
        const char *curve, *expect;
    } bad[] = {
        {CURVE("[1024, 1024]", "[1, 1]", "[1, 1]", "[1, 1]"),
         "gpu.attention_by_length.lengths: [1]: lengths must increase"},
        {CURVE("[4096, 1024]", "[1, 1]", "[1, 1]", "[1, 1]"),
         "gpu.attention_by_length.lengths: [1]: lengths must increase"},
        {CURVE("[0.5]", "[1]", "[1]", "[1]"),
         "gpu.attention_by_length.lengths: [0]: must be a length from 1 to 1e9 tokens"},
        {CURVE("[]", "[]", "[]", "[]"),
         "gpu.attention_by_length.lengths: must be an array of 1 to 16 lengths"},
        {CURVE("[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]", "[1]", "[1]", "[1]"),
         "gpu.attention_by_length.lengths: must be an array of 1 to 16 lengths"},
        {CURVE("[1024, 4096]", "[1]", "[1, 1]", "[1, 1]"),
         "gpu.attention_by_length.forward_causal: must be an array of 2 factors, one per "
         "length"},
        {CURVE("[1024, 4096]", "[1, 1]", "[1, 0]", "[1, 1]"),
         "gpu.attention_by_length.forward_noncausal: [1]: must be a factor in (0, 4]"},
        {CURVE("[1024, 4096]", "[1, 1]", "[1, 1]", "[1, 4.5]"),
         "gpu.attention_by_length.backward: [1]: must be a factor in (0, 4]"},
        {CURVE("[1024, 4096]", "[1, 1]", "[1, 1]", "[1, \"1\"]"),
         "gpu.attention_by_length.backward: [1]: must be a factor in (0, 4]"},
        {", \"attention_by_length\": {\"lengths\": [1024], \"forward_causal\": [1],"
         " \"forward_noncausal\": [1]}",
         "gpu.attention_by_length.backward: required field is missing"},
        {", \"attention_by_length\": {\"lengths\": [1024], \"causal\": [1]}",
         "gpu.attention_by_length.causal: unknown field"},
        {", \"attention_by_length\": [1024]", "gpu.attention_by_length: must be an object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ap_cluster c;
        char err[AP_ERR_LEN] = "";
        CHECK(parse_curve(bad[i].curve, &c, err) == AP_EINPUT);
        CHECK_STR_HAS(err, "cluster.json: ");
        CHECK_STR_HAS(err, bad[i].expect);
    }
}

static void missing_file_is_an_input_error(void)
{
    ap_cluster c;
    char err[AP_ERR_LEN];
    CHECK(ap_cluster_load("/nonexistent/cluster.json", 0, 0, &c, err) == AP_EINPUT);
    CHECK_STR_HAS(err, "/nonexistent/cluster.json");
}

int main(void)
{
    RUN(h100_preset_has_datasheet_numbers);
    RUN(every_preset_loads_with_sane_numbers);
    RUN(a100_40g_is_the_80g_with_less_and_slower_memory);
    RUN(h800_nvlink_is_the_deepseek_figure);
    RUN(sizing_fills_whole_nodes_or_fails);
    RUN(presets_round_trip_through_files);
    RUN(measured_file_round_trips_and_overrides_hbm);
    RUN(file_counts_can_be_overridden);
    RUN(every_bad_cluster_file_is_rejected_with_its_message);
    RUN(a_length_curve_is_read_priced_and_round_trips);
    RUN(a_bad_length_curve_is_refused_naming_its_field);
    RUN(missing_file_is_an_input_error);
    return DONE();
}
