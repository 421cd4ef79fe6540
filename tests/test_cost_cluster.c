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
    const char *names[] = {"a100-80g", "h100-sxm", "h200", "b200", "h800"};
    for (int i = 0; i < 5; i++) {
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
    CHECK(a->hbm_bytes == b->hbm_bytes && a->mem_reserved == b->mem_reserved);
    CHECK(a->hbm_bw == b->hbm_bw && a->hbm_eff == b->hbm_eff);
    CHECK(a->hbm_bw_measured == b->hbm_bw_measured);
    CHECK(a->kernel_floor == b->kernel_floor);
    CHECK(a->intra_bw == b->intra_bw && a->intra_lat == b->intra_lat);
    CHECK(a->inter_bw == b->inter_bw && a->inter_lat == b->inter_lat);
    CHECK(a->has_measured == b->has_measured);
    CHECK(!strcmp(a->measured_date, b->measured_date));
    CHECK(!strcmp(a->measured_command, b->measured_command));
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
    const char *names[] = {"a100-80g", "h100-sxm", "h200", "b200", "h800"};
    for (int i = 0; i < 5; i++) {
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
    RUN(h800_nvlink_is_the_deepseek_figure);
    RUN(sizing_fills_whole_nodes_or_fails);
    RUN(presets_round_trip_through_files);
    RUN(measured_file_round_trips_and_overrides_hbm);
    RUN(file_counts_can_be_overridden);
    RUN(every_bad_cluster_file_is_rejected_with_its_message);
    RUN(missing_file_is_an_input_error);
    return DONE();
}
