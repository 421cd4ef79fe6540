/* gpu_run.c -- a whole profiling run on one node: find the GPUs, measure
 * GEMMs and HBM on the first, collectives on every power-of-two group, and
 * write the cluster file. Under --mpi the run is gpu_mpi.c's instead. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "profiler/gpu.h"

void ap_prof_stamp(ap_profile_result *r, const ap_profile_options *o)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(r->date, sizeof r->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(r->command, sizeof r->command, "%s", o->command);
}

int ap_prof_write(const ap_profile_options *o, const ap_profile_result *r,
                         char *err)
{
    ap_cluster c;
    int st = ap_profile_build_cluster(r, &c, err);
    if (st != AP_OK)
        return st;
    char *text = ap_profile_cluster_json(&c, err);
    st = text ? ap_profile_write_file(o->out, text, err) : AP_EINTERNAL;
    if (st == AP_OK)
        fprintf(stderr, "autopar profile: wrote %s (%d GEMMs, %d collectives)\n",
                o->out, r->ngemm, r->ncoll);
    free(text);
    ap_cluster_free(&c);
    return st;
}

int ap_profile_run(const ap_profile_options *o, char *err)
{
    if (o->mpi) {
#ifdef AP_HAVE_MPI
        return ap_prof_run_mpi(o, err);
#else
        snprintf(err, AP_ERR_LEN,
                 "autopar profile: --mpi: this build has no MPI (install libopenmpi-dev "
                 "with AP_WITH_MPI=1 sh scripts/install-deps.sh and reconfigure)");
        return AP_EINPUT;
#endif
    }
    ap_profile_result r = {0};
    int ndev = 0;
    int st = ap_prof_detect(o, &r, &ndev, err);
    if (st != AP_OK)
        return st;
    r.nodes = 1;
    r.gpus_per_node = ndev;
    ap_prof_stamp(&r, o);
    fprintf(stderr, "autopar profile: %d x %s, %.0f GiB, %d SMs\n", ndev, r.gpu_name,
            r.hbm_bytes / (1 << 30), r.sm_count);
    char plan[256];
    if (ap_profile_describe(o, r.gpu_name, ap_profile_has_fp8(r.cc_major, r.cc_minor),
                            ndev, plan, sizeof plan, err) == AP_OK)
        fprintf(stderr, "autopar profile: measuring %s\n", plan);
    st = ap_prof_hbm(o, &r, err);
    if (st == AP_OK)
        st = ap_prof_gemm(o, &r, err);
    if (st == AP_OK)
        st = ap_prof_coll_local(o, ndev, &r, err);
    if (st == AP_OK)
        st = ap_prof_write(o, &r, err);
    ap_profile_result_free(&r);
    return st;
}
