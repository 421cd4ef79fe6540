/* cluster.c -- sizing, lookups and lifetime of an ap_cluster. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "costmodel/costmodel.h"

int ap_cluster_set_size(ap_cluster *c, int gpus, int gpus_per_node, char *err)
{
    if (gpus < 0 || gpus > AP_MAX_GPUS) {
        snprintf(err, AP_ERR_LEN, "%s: gpus: must be between 1 and %d, not %d",
                 c->source, AP_MAX_GPUS, gpus);
        return AP_EINPUT;
    }
    if (gpus_per_node < 0 || gpus_per_node > 1024) {
        snprintf(err, AP_ERR_LEN,
                 "%s: gpus_per_node: must be between 1 and 1024, not %d",
                 c->source, gpus_per_node);
        return AP_EINPUT;
    }
    int per_node = gpus_per_node ? gpus_per_node : c->gpus_per_node;
    if (gpus == 0) {
        c->gpus_per_node = per_node;
        return AP_OK;
    }
    if (gpus <= per_node) {
        c->nodes = 1;
        c->gpus_per_node = gpus;
        return AP_OK;
    }
    if (gpus % per_node) {
        /* The reader is told the counts on either side that do fill whole
         * nodes, and how to say that the nodes are of another size. */
        int below = gpus / per_node * per_node;
        snprintf(err, AP_ERR_LEN,
                 "%s: %d GPUs do not fill whole nodes of %d GPUs: use %d or %d GPUs, "
                 "or give the size of your nodes (--gpus-per-node)", c->source, gpus,
                 per_node, below, below + per_node);
        return AP_EINPUT;
    }
    c->nodes = gpus / per_node;
    c->gpus_per_node = per_node;
    return AP_OK;
}

/* By stat, not by opening it: opening a FIFO waits for a writer. */
static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A name is a preset when one matches; otherwise it is a path, unless it
 * looks like neither a path nor an existing file, when the preset error
 * (which lists the presets) helps more than "no such file". */
int ap_cluster_resolve(const char *name_or_path, int gpus, int gpus_per_node,
                       ap_cluster *c, char *err)
{
    if (!name_or_path || !*name_or_path)
        name_or_path = "h100-sxm";
    char perr[AP_ERR_LEN];
    int rc = ap_cluster_preset(name_or_path, gpus, gpus_per_node, c, perr);
    if (rc == AP_OK)
        return AP_OK;
    int pathlike = strchr(name_or_path, '/') || strstr(name_or_path, ".json");
    if (!pathlike && !file_exists(name_or_path)) {
        snprintf(err, AP_ERR_LEN, "%s", perr);
        return rc;
    }
    return ap_cluster_load(name_or_path, gpus, gpus_per_node, c, err);
}

void ap_cluster_free(ap_cluster *c)
{
    if (!c)
        return;
    free(c->gemm);
    free(c->coll);
    c->gemm = NULL;
    c->coll = NULL;
    c->ngemm = c->ncoll = 0;
}

double ap_cluster_gemm_eff(const ap_cluster *c, ap_dtype dt)
{
    if (dt == AP_FP8 && c->peak_flops[AP_FP8] > 0 && c->gemm_eff_fp8 > 0)
        return c->gemm_eff_fp8;
    return c->gemm_eff > 0 ? c->gemm_eff : 1;
}

void ap_cluster_scale_rate(ap_cluster *c, double f)
{
    c->gemm_eff *= f;
    c->gemm_eff_fp8 *= f;
    c->attn_eff *= f;
    c->attn_bwd_eff *= f;
}

void ap_cluster_kernel_rate(ap_cluster *c)
{
    if (c->calib_scale > 0)
        ap_cluster_scale_rate(c, 1 / c->calib_scale);
    c->calib_scale = c->calib_measured_s = 0;
    c->calib_from[0] = '\0';
}

/* A preset is one whatever its rate was scaled to: that step was published,
 * not measured on the user's GPUs. */
const char *ap_cluster_basis(const ap_cluster *c)
{
    if (!strcmp(c->source, "preset"))
        return "preset";
    if (c->ngemm > 0 || c->ncoll > 0)
        return "profile";
    if (c->calib_scale > 0)
        return "calibrated";
    return "file";
}

int ap_cluster_gpus(const ap_cluster *c)
{
    return c->nodes * c->gpus_per_node;
}

double ap_cluster_usable_bytes(const ap_cluster *c)
{
    double usable = c->hbm_bytes - c->mem_reserved;
    return usable > 0 ? usable : 0;
}

double ap_cluster_hbm_bw(const ap_cluster *c)
{
    if (c->hbm_bw_measured > 0)
        return c->hbm_bw_measured;
    return c->hbm_bw * c->hbm_eff;
}

static const char *const coll_names[AP_NCOLL] = {
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"};

const char *ap_coll_name(ap_coll op)
{
    if ((int)op < 0 || op >= AP_NCOLL)
        return "unknown";
    return coll_names[op];
}

int ap_coll_from_name(const char *s)
{
    for (int i = 0; s && i < AP_NCOLL; i++)
        if (!strcmp(s, coll_names[i]))
            return i;
    return -1;
}
