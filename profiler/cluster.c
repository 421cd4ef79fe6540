/* cluster.c -- turns what a profiling run measured into a cluster: the
 * matching preset supplies what cannot be measured in minutes (datasheet
 * peaks), the measurements replace the rest, and the file carries both. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profiler/profiler.h"

void ap_profile_result_free(ap_profile_result *r)
{
    if (!r)
        return;
    free(r->gemm);
    free(r->coll);
    r->gemm = NULL;
    r->coll = NULL;
    r->ngemm = r->ncoll = 0;
}

/* Copies src into dst of n bytes, cutting it short if need be. */
static void copy_text(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src);
    if (len >= n)
        len = n - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

static int has_word(const char *name, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = name; *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && toupper((unsigned char)p[i]) == word[i])
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

const char *ap_profile_preset_for_gpu(const char *gpu_name)
{
    static const struct {
        const char *marker, *preset;
    } table[] = {
        {"H100", "h100-sxm"}, {"H200", "h200"}, {"H800", "h800"},
        {"B200", "b200"},     {"A100-SXM4-40GB", "a100-40g"},
        {"A100", "a100-80g"},
    };
    if (!gpu_name)
        return NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (has_word(gpu_name, table[i].marker))
            return table[i].preset;
    return NULL;
}

static double best_flops(const ap_profile_result *r, ap_dtype dt)
{
    double best = 0;
    for (int i = 0; i < r->ngemm; i++) {
        const ap_gemm_sample *g = &r->gemm[i];
        if (g->dtype != dt || !(g->seconds > 0))
            continue;
        double f = ap_profile_gemm_flops(g->m, g->n, g->k) / g->seconds;
        if (f > best)
            best = f;
    }
    return best;
}

/* An unknown GPU gets the h100-sxm preset's ratios between dtypes, scaled so
 * that its bf16 roofline (peak * gemm_eff) equals the best bf16 GEMM measured,
 * and an HBM peak such that hbm_bw * hbm_eff is the measured bandwidth. */
static void scale_unknown(const ap_profile_result *r, ap_cluster *c)
{
    double best = best_flops(r, AP_BF16);
    double roof = c->peak_flops[AP_BF16] * c->gemm_eff;
    if (best > 0 && roof > 0)
        for (int d = 0; d < AP_NDTYPES; d++)
            c->peak_flops[d] *= best / roof;
    if (r->hbm_bw > 0 && c->hbm_eff > 0)
        c->hbm_bw = r->hbm_bw / c->hbm_eff;
}

static int copy_tables(const ap_profile_result *r, ap_cluster *c, char *err)
{
    c->gemm = NULL;
    c->coll = NULL;
    c->ngemm = c->ncoll = 0;
    if (r->ngemm > 0) {
        c->gemm = malloc((size_t)r->ngemm * sizeof *c->gemm);
        if (!c->gemm)
            goto oom;
        memcpy(c->gemm, r->gemm, (size_t)r->ngemm * sizeof *c->gemm);
        c->ngemm = r->ngemm;
    }
    if (r->ncoll > 0) {
        c->coll = malloc((size_t)r->ncoll * sizeof *c->coll);
        if (!c->coll)
            goto oom;
        memcpy(c->coll, r->coll, (size_t)r->ncoll * sizeof *c->coll);
        c->ncoll = r->ncoll;
    }
    return AP_OK;
oom:
    snprintf(err, AP_ERR_LEN, "autopar profile: out of memory");
    return AP_EINTERNAL;
}

/* The cost model (costmodel/collective.c) prices an all-reduce of n ranks on
 * `nodes` nodes as NCCL's ring does: 2(n-1) hops, 2(nodes-1) of them between
 * nodes, each paying its link's latency, and a bus bandwidth of intra_bw in a
 * node or min(intra_bw, inter_bw * n / nodes) across nodes (one NIC rail per
 * GPU). The links are solved from the fitted lines under that model, so that
 * its analytic fallback passes through the measured endpoints. */
static void set_links(const ap_profile_result *r, ap_cluster *c)
{
    ap_profile_link_fit f;
    if (ap_profile_fit_link(r->coll, r->ncoll, 0, &f)) {
        c->intra_bw = f.busbw;
        c->intra_lat = f.alpha / (2.0 * (f.ranks - 1));
    }
    if (ap_profile_fit_link(r->coll, r->ncoll, 1, &f)) {
        int hops = 2 * (f.ranks - 1), inter = 2 * (f.nodes - 1);
        double lat = (f.alpha - (hops - inter) * c->intra_lat) / inter;
        c->inter_bw = f.busbw * f.nodes / f.ranks;
        c->inter_lat = lat > 0 ? lat : 0;
    }
}

int ap_profile_build_cluster(const ap_profile_result *r, ap_cluster *c,
                             char *err)
{
    const char *preset = ap_profile_preset_for_gpu(r->gpu_name);
    int gpn = r->gpus_per_node > 0 ? r->gpus_per_node : 1;
    int nodes = r->nodes > 0 ? r->nodes : 1;
    int st = ap_cluster_preset(preset ? preset : "h100-sxm", nodes * gpn, gpn,
                               c, err);
    if (st != AP_OK)
        return st;
    /* The preset's measured tables, if it ever has any, are replaced, and
     * its tensor-core rate goes back to the kernel figures, which an
     * unknown GPU's are scaled from, before the profile's own rate (a step
     * runs measured kernels slower too) is put on at the end. */
    free(c->gemm);
    free(c->coll);
    ap_cluster_kernel_rate(c);
    if (!preset)
        scale_unknown(r, c);
    copy_text(c->name, sizeof c->name, r->gpu_name[0] ? r->gpu_name : "unknown GPU");
    snprintf(c->source, sizeof c->source, "autopar profile");
    c->nodes = nodes;
    c->gpus_per_node = gpn;
    copy_text(c->gpu_name, sizeof c->gpu_name, r->gpu_name);
    if (r->sm_count > 0)
        c->sms = r->sm_count;
    if (r->hbm_bytes > 0)
        c->hbm_bytes = r->hbm_bytes;
    c->hbm_bw_measured = r->hbm_bw > 0 ? r->hbm_bw : 0;
    c->has_measured = 1;
    copy_text(c->measured_date, sizeof c->measured_date, r->date);
    copy_text(c->measured_command, sizeof c->measured_command, r->command);
    copy_text(c->measured_gemm_timing, sizeof c->measured_gemm_timing, AP_PROFILE_GEMM_TIMING);
    set_links(r, c);
    ap_cluster_profile_rate(c);
    return copy_tables(r, c, err);
}

char *ap_profile_cluster_json(const ap_cluster *c, char *err)
{
    /* Everything a profile knows has a place in the cluster (measured date,
     * command and HBM bandwidth, SM count), so the cost model's writer, which
     * adds each sample's tflops, algbw and busbw, writes the whole file. */
    char *text = ap_cluster_to_json(c);
    if (!text)
        snprintf(err, AP_ERR_LEN, "autopar profile: out of memory");
    return text;
}

int ap_profile_write_file(const char *path, const char *text, char *err)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, AP_ERR_LEN, "%s: %s", path, strerror(errno));
        return AP_EINPUT;
    }
    int ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, AP_ERR_LEN, "%s: %s", path, strerror(errno));
        remove(tmp);
        return AP_EINPUT;
    }
    return AP_OK;
}
