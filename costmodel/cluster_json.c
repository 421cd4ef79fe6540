/* cluster_json.c -- reads and writes cluster files ("autopar-cluster/1",
 * docs/cluster-format.md). Every field is checked, and a bad one is
 * reported as "FILE: json.path: what is wrong"; unknown fields are errors so
 * that a misspelt field is never silently ignored. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "costmodel/costmodel.h"

#define FORMAT "autopar-cluster/1"
#define MAX_SAMPLES 100000
#define PATH_LEN 160

typedef struct {
    const char *file;
    char *err;
} ctx;

/* NUM_SECONDS is a measured time: no kernel or collective takes under a
 * nanosecond, and the bound keeps the rates written back (bytes/seconds,
 * FLOP/seconds) finite. NUM_INFO is a figure derived from the others and
 * ignored on reading (algbw, busbw, tflops): any finite positive number. */
/* NUM_RATE is a FLOP/s or bytes/s figure, from 1e6: the cost model divides
 * by it, and a rate of 1e-300 would turn every price into infinity. */
/* NUM_SIZE is a GEMM dimension or a buffer in bytes, from 1: the measured
 * tables are interpolated in log space. */
typedef enum {
    NUM_POSITIVE, NUM_NONNEG, NUM_FRACTION, NUM_SECONDS, NUM_INFO, NUM_RATE,
    NUM_SIZE
} num_kind;

static int fail(ctx *x, const char *path, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(x->err, AP_ERR_LEN, "%s: %s%s%s", x->file, path, *path ? ": " : "",
             msg);
    return AP_EINPUT;
}

static void join(char *out, const char *prefix, const char *key)
{
    snprintf(out, PATH_LEN, "%.100s%s%.50s", prefix, *prefix ? "." : "", key);
}

/* Rejects fields not in `allowed` (NULL-terminated) and repeated fields. */
static int check_fields(ctx *x, const cJSON *obj, const char *prefix,
                        const char *const *allowed)
{
    char path[PATH_LEN];
    for (const cJSON *it = obj->child; it; it = it->next) {
        int known = 0;
        for (const char *const *a = allowed; *a; a++)
            known |= !strcmp(*a, it->string);
        join(path, prefix, it->string);
        if (!known)
            return fail(x, path, "unknown field");
        for (const cJSON *jt = obj->child; jt != it; jt = jt->next)
            if (!strcmp(jt->string, it->string))
                return fail(x, path, "duplicate field");
    }
    return AP_OK;
}

/* Looks `key` up in `obj` and writes its JSON path into `path` (PATH_LEN
 * bytes) for the caller's messages. Returns the field, or NULL when it is
 * absent; *rc is then the error for a required field and AP_OK for an
 * optional one, which keeps the caller's default. */
static const cJSON *field(ctx *x, const cJSON *obj, const char *prefix,
                          const char *key, int required, char *path, int *rc)
{
    join(path, prefix, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *rc = v || !required ? AP_OK : fail(x, path, "required field is missing");
    return v;
}

static const cJSON *need_object(ctx *x, const cJSON *obj, const char *prefix,
                                const char *key, int *rc)
{
    char path[PATH_LEN];
    const cJSON *v = field(x, obj, prefix, key, 1, path, rc);
    if (!v)
        return NULL;
    if (!cJSON_IsObject(v))
        *rc = fail(x, path, "must be an object");
    return *rc ? NULL : v;
}

static int get_number(ctx *x, const cJSON *obj, const char *prefix,
                      const char *key, num_kind kind, int required, double *out)
{
    char path[PATH_LEN];
    int rc;
    const cJSON *v = field(x, obj, prefix, key, required, path, &rc);
    if (!v)
        return rc;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    int ok = isfinite(d) && (d < 1e30 || kind == NUM_INFO);
    if (kind == NUM_POSITIVE || kind == NUM_INFO)
        ok = ok && d > 0;
    else if (kind == NUM_NONNEG)
        ok = ok && d >= 0;
    else if (kind == NUM_SECONDS)
        ok = ok && d >= 1e-9;
    else if (kind == NUM_RATE)
        ok = ok && d >= 1e6;
    else if (kind == NUM_SIZE)
        ok = ok && d >= 1;
    else /* an efficiency; the cost model divides by it too */
        ok = ok && d >= 1e-3 && d <= 1;
    if (!ok)
        return fail(x, path, kind == NUM_POSITIVE || kind == NUM_INFO
                                 ? "must be a positive number"
                             : kind == NUM_NONNEG ? "must be a non-negative number"
                             : kind == NUM_SECONDS ? "must be a time from 1e-9 to 1e30 seconds"
                             : kind == NUM_RATE ? "must be a rate from 1e6 to 1e30 per second"
                             : kind == NUM_SIZE ? "must be a size from 1 to 1e30"
                                                  : "must be a number in [0.001, 1]");
    *out = d;
    return AP_OK;
}

static int get_int(ctx *x, const cJSON *obj, const char *prefix,
                   const char *key, int lo, int hi, int required, int *out)
{
    char path[PATH_LEN];
    int rc;
    const cJSON *v = field(x, obj, prefix, key, required, path, &rc);
    if (!v)
        return rc;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi && d == floor(d)))
        return fail(x, path, "must be an integer between %d and %d", lo, hi);
    *out = (int)d;
    return AP_OK;
}

static int get_string(ctx *x, const cJSON *obj, const char *prefix,
                      const char *key, int required, char *out, size_t cap)
{
    char path[PATH_LEN];
    int rc;
    const cJSON *v = field(x, obj, prefix, key, required, path, &rc);
    if (!v)
        return rc;
    if (!cJSON_IsString(v))
        return fail(x, path, "must be a string");
    if (strlen(v->valuestring) >= cap)
        return fail(x, path, "longer than %zu characters", cap - 1);
    /* Names, dates and the command that measured go into reports and plan
     * files, whose reader refuses control characters (an escaped newline
     * would reach a launch script). */
    int ch = ap_control_char(v->valuestring);
    if (ch)
        return fail(x, path, "a control character (0x%02x)", ch);
    memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
    return AP_OK;
}

static int parse_peaks(ctx *x, const cJSON *gpu, ap_cluster *c)
{
    static const char *const fields[] = {"bf16", "fp16", "fp32", "fp8", NULL};
    int rc = AP_OK;
    const cJSON *pk = need_object(x, gpu, "gpu", "peak_flops", &rc);
    if (!pk)
        return rc;
    const char *p = "gpu.peak_flops";
    if ((rc = check_fields(x, pk, p, fields)) ||
        (rc = get_number(x, pk, p, "bf16", NUM_RATE, 1, &c->peak_flops[AP_BF16])) ||
        (rc = get_number(x, pk, p, "fp16", NUM_RATE, 1, &c->peak_flops[AP_FP16])) ||
        (rc = get_number(x, pk, p, "fp32", NUM_RATE, 1, &c->peak_flops[AP_FP32])) ||
        (rc = get_number(x, pk, p, "fp8", NUM_RATE, 0, &c->peak_flops[AP_FP8])))
        return rc;
    return AP_OK;
}

static int parse_tile(ctx *x, const cJSON *gpu, ap_cluster *c)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(gpu, "gemm_tile");
    if (!t)
        return AP_OK;
    if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) != 2)
        return fail(x, "gpu.gemm_tile", "must be an array [m, n]");
    int v[2];
    for (int i = 0; i < 2; i++) {
        const cJSON *e = cJSON_GetArrayItem(t, i);
        double d = cJSON_IsNumber(e) ? e->valuedouble : NAN;
        if (!(d >= 1 && d <= 4096 && d == floor(d)))
            return fail(x, "gpu.gemm_tile", "must hold two integers between 1 and 4096");
        v[i] = (int)d;
    }
    c->tile_m = v[0];
    c->tile_n = v[1];
    return AP_OK;
}

/* The longest kernel a curve may name: far past any context trained on,
 * and small enough that its logarithm stays well conditioned. */
#define MAX_CURVE_LENGTH 1e9
/* A length factor multiplies an efficiency; 4 covers a curve taken
 * relative to a pessimistic efficiency without letting a typo price
 * attention at many times the peak (the product is capped there too). */
#define MAX_CURVE_FACTOR 4.0

/* One row of gpu.attention_by_length into `out`: with want < 0 the lengths
 * (1 to AP_ATTN_LEN_MAX of them, increasing), else `want` factors, one per
 * length. The row's count goes to *n. */
static int parse_curve_row(ctx *x, const cJSON *obj, const char *key, int want,
                           double *out, int *n)
{
    char p[PATH_LEN];
    int rc, lengths = want < 0;
    const cJSON *a = field(x, obj, "gpu.attention_by_length", key, 1, p, &rc);
    if (!a)
        return rc;
    int count = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (lengths && !(count >= 1 && count <= AP_ATTN_LEN_MAX))
        return fail(x, p, "must be an array of 1 to %d lengths", AP_ATTN_LEN_MAX);
    if (!lengths && count != want)
        return fail(x, p, "must be an array of %d factors, one per length", want);
    for (int i = 0; i < count; i++) {
        const cJSON *e = cJSON_GetArrayItem(a, i);
        double d = cJSON_IsNumber(e) ? e->valuedouble : NAN;
        if (lengths && !(d >= 1 && d <= MAX_CURVE_LENGTH))
            return fail(x, p, "[%d]: must be a length from 1 to 1e9 tokens", i);
        if (lengths && i > 0 && !(d > out[i - 1]))
            return fail(x, p, "[%d]: lengths must increase", i);
        if (!lengths && !(d > 0 && d <= MAX_CURVE_FACTOR))
            return fail(x, p, "[%d]: must be a factor in (0, 4]", i);
        out[i] = d;
    }
    *n = count;
    return AP_OK;
}

/* gpu.attention_by_length: optional, but whole when present. */
static int parse_attn_curve(ctx *x, const cJSON *gpu, ap_cluster *c)
{
    static const char *const fields[] = {"lengths", "forward_causal",
                                         "forward_noncausal", "backward", NULL};
    const char *p = "gpu.attention_by_length";
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(gpu, "attention_by_length");
    int n = 0, m = 0, rc;
    if (!a)
        return AP_OK;
    if (!cJSON_IsObject(a))
        return fail(x, p, "must be an object");
    if ((rc = check_fields(x, a, p, fields)) ||
        (rc = parse_curve_row(x, a, "lengths", -1, c->attn_len, &n)) ||
        (rc = parse_curve_row(x, a, "forward_causal", n, c->attn_len_causal, &m)) ||
        (rc = parse_curve_row(x, a, "forward_noncausal", n, c->attn_len_noncausal, &m)) ||
        (rc = parse_curve_row(x, a, "backward", n, c->attn_len_bwd, &m)))
        return rc;
    c->attn_len_n = n;
    return AP_OK;
}

static int parse_gpu(ctx *x, const cJSON *root, ap_cluster *c)
{
    static const char *const fields[] = {
        "name", "sms", "memory_bytes", "reserved_bytes", "hbm_bandwidth",
        "hbm_efficiency", "gemm_efficiency", "gemm_efficiency_fp8", "attention_efficiency",
        "attention_backward_efficiency", "attention_by_length", "gemm_tile",
        "kernel_floor_s", "peak_flops", NULL};
    int rc = AP_OK;
    const cJSON *g = need_object(x, root, "", "gpu", &rc);
    if (!g)
        return rc;
    const char *p = "gpu";
    if ((rc = check_fields(x, g, p, fields)) ||
        (rc = get_string(x, g, p, "name", 1, c->gpu_name, sizeof c->gpu_name)) ||
        (rc = get_int(x, g, p, "sms", 1, 100000, 1, &c->sms)) ||
        (rc = get_number(x, g, p, "memory_bytes", NUM_POSITIVE, 1, &c->hbm_bytes)) ||
        (rc = get_number(x, g, p, "reserved_bytes", NUM_NONNEG, 1, &c->mem_reserved)) ||
        (rc = get_number(x, g, p, "hbm_bandwidth", NUM_RATE, 1, &c->hbm_bw)) ||
        (rc = get_number(x, g, p, "hbm_efficiency", NUM_FRACTION, 1, &c->hbm_eff)) ||
        (rc = get_number(x, g, p, "gemm_efficiency", NUM_FRACTION, 1, &c->gemm_eff)) ||
        (rc = get_number(x, g, p, "gemm_efficiency_fp8", NUM_FRACTION, 0,
                         &c->gemm_eff_fp8)) ||
        (rc = get_number(x, g, p, "attention_efficiency", NUM_FRACTION, 0, &c->attn_eff)) ||
        (rc = get_number(x, g, p, "attention_backward_efficiency", NUM_FRACTION, 0,
                         &c->attn_bwd_eff)) ||
        (rc = parse_attn_curve(x, g, c)) ||
        (rc = parse_tile(x, g, c)) ||
        (rc = get_number(x, g, p, "kernel_floor_s", NUM_NONNEG, 1, &c->kernel_floor)) ||
        (rc = parse_peaks(x, g, c)))
        return rc;
    if (c->mem_reserved >= c->hbm_bytes)
        return fail(x, "gpu.reserved_bytes", "must be less than gpu.memory_bytes");
    if (c->kernel_floor > 1)
        return fail(x, "gpu.kernel_floor_s", "must be at most 1 second");
    return AP_OK;
}

static int parse_link(ctx *x, const cJSON *links, const char *key, double *bw,
                      double *lat)
{
    static const char *const fields[] = {"bandwidth", "latency_s", NULL};
    char p[PATH_LEN];
    join(p, "links", key);
    int rc = AP_OK;
    const cJSON *l = need_object(x, links, "links", key, &rc);
    if (!l)
        return rc;
    if ((rc = check_fields(x, l, p, fields)) ||
        (rc = get_number(x, l, p, "bandwidth", NUM_RATE, 1, bw)) ||
        (rc = get_number(x, l, p, "latency_s", NUM_NONNEG, 1, lat)))
        return rc;
    if (*lat > 1)
        return fail(x, p, "latency_s must be at most 1 second");
    return AP_OK;
}

static int parse_links(ctx *x, const cJSON *root, ap_cluster *c)
{
    static const char *const fields[] = {"intra", "inter", NULL};
    int rc = AP_OK;
    const cJSON *l = need_object(x, root, "", "links", &rc);
    if (!l)
        return rc;
    if ((rc = check_fields(x, l, "links", fields)) ||
        (rc = parse_link(x, l, "intra", &c->intra_bw, &c->intra_lat)) ||
        (rc = parse_link(x, l, "inter", &c->inter_bw, &c->inter_lat)))
        return rc;
    return AP_OK;
}

/* Returns the array at measured.KEY (or NULL when absent) and its length. */
static int sample_array(ctx *x, const cJSON *m, const char *key,
                        const cJSON **arr, int *n)
{
    char p[PATH_LEN];
    join(p, "measured", key);
    *arr = cJSON_GetObjectItemCaseSensitive(m, key);
    *n = 0;
    if (!*arr)
        return AP_OK;
    if (!cJSON_IsArray(*arr))
        return fail(x, p, "must be an array");
    *n = cJSON_GetArraySize(*arr);
    if (*n > MAX_SAMPLES)
        return fail(x, p, "more than %d samples", MAX_SAMPLES);
    return AP_OK;
}

static int parse_gemm_sample(ctx *x, const cJSON *e, const char *p,
                             ap_gemm_sample *s)
{
    static const char *const fields[] = {"dtype", "m", "n", "k", "seconds",
                                         "tflops", NULL};
    char dt[16] = "";
    double tflops = 0;
    int rc;
    if (!cJSON_IsObject(e))
        return fail(x, p, "must be an object");
    if ((rc = check_fields(x, e, p, fields)) ||
        (rc = get_string(x, e, p, "dtype", 1, dt, sizeof dt)) ||
        (rc = get_number(x, e, p, "m", NUM_SIZE, 1, &s->m)) ||
        (rc = get_number(x, e, p, "n", NUM_SIZE, 1, &s->n)) ||
        (rc = get_number(x, e, p, "k", NUM_SIZE, 1, &s->k)) ||
        (rc = get_number(x, e, p, "seconds", NUM_SECONDS, 1, &s->seconds)) ||
        (rc = get_number(x, e, p, "tflops", NUM_INFO, 0, &tflops)))
        return rc;
    if (ap_dtype_from_name(dt, &s->dtype) != AP_OK ||
        (s->dtype != AP_BF16 && s->dtype != AP_FP16 && s->dtype != AP_FP32 &&
         s->dtype != AP_FP8)) {
        char q[PATH_LEN];
        join(q, p, "dtype");
        return fail(x, q, "unknown dtype \"%s\" (bf16, fp16, fp32, fp8)", dt);
    }
    return AP_OK;
}

static int parse_coll_sample(ctx *x, const cJSON *e, const char *p,
                             ap_coll_sample *s)
{
    static const char *const fields[] = {"op", "ranks", "nodes", "bytes",
                                         "seconds", "algbw", "busbw", NULL};
    char op[32] = "";
    double ignored = 0;
    int rc;
    if (!cJSON_IsObject(e))
        return fail(x, p, "must be an object");
    if ((rc = check_fields(x, e, p, fields)) ||
        (rc = get_string(x, e, p, "op", 1, op, sizeof op)) ||
        (rc = get_int(x, e, p, "ranks", 2, 1000000, 1, &s->ranks)) ||
        (rc = get_int(x, e, p, "nodes", 1, 1000000, 1, &s->nodes)) ||
        (rc = get_number(x, e, p, "bytes", NUM_SIZE, 1, &s->bytes)) ||
        (rc = get_number(x, e, p, "seconds", NUM_SECONDS, 1, &s->seconds)) ||
        (rc = get_number(x, e, p, "algbw", NUM_INFO, 0, &ignored)) ||
        (rc = get_number(x, e, p, "busbw", NUM_INFO, 0, &ignored)))
        return rc;
    int k = ap_coll_from_name(op);
    if (k < 0) {
        char q[PATH_LEN];
        join(q, p, "op");
        return fail(x, q, "unknown collective \"%s\" (all_reduce, all_gather, "
                          "reduce_scatter, all_to_all, send_recv)", op);
    }
    s->op = (ap_coll)k;
    if (s->nodes > s->ranks) {
        char q[PATH_LEN];
        join(q, p, "nodes");
        return fail(x, q, "must not exceed ranks");
    }
    return AP_OK;
}

static int parse_samples(ctx *x, const cJSON *m, ap_cluster *c)
{
    const cJSON *arr;
    int n, rc;
    char p[PATH_LEN];
    if ((rc = sample_array(x, m, "gemm", &arr, &n)))
        return rc;
    if (n > 0 && !(c->gemm = calloc((size_t)n, sizeof *c->gemm)))
        return fail(x, "", "out of memory");
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "measured.gemm[%d]", i);
        if ((rc = parse_gemm_sample(x, cJSON_GetArrayItem(arr, i), p, &c->gemm[i])))
            return rc;
        c->ngemm = i + 1;
    }
    if ((rc = sample_array(x, m, "collectives", &arr, &n)))
        return rc;
    if (n > 0 && !(c->coll = calloc((size_t)n, sizeof *c->coll)))
        return fail(x, "", "out of memory");
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "measured.collectives[%d]", i);
        if ((rc = parse_coll_sample(x, cJSON_GetArrayItem(arr, i), p, &c->coll[i])))
            return rc;
        c->ncoll = i + 1;
    }
    return AP_OK;
}

static int parse_measured(ctx *x, const cJSON *root, ap_cluster *c)
{
    static const char *const fields[] = {"date", "command", "gemm_timing",
                                         "hbm_bandwidth", "gemm", "collectives", NULL};
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "measured");
    int rc;
    if (!m)
        return AP_OK;
    if (!cJSON_IsObject(m))
        return fail(x, "measured", "must be an object");
    c->has_measured = 1;
    const char *p = "measured";
    if ((rc = check_fields(x, m, p, fields)) ||
        (rc = get_string(x, m, p, "date", 0, c->measured_date, sizeof c->measured_date)) ||
        (rc = get_string(x, m, p, "command", 0, c->measured_command, sizeof c->measured_command)) ||
        (rc = get_string(x, m, p, "gemm_timing", 0, c->measured_gemm_timing,
                         sizeof c->measured_gemm_timing)) ||
        (rc = get_number(x, m, p, "hbm_bandwidth", NUM_RATE, 0, &c->hbm_bw_measured)))
        return rc;
    return parse_samples(x, m, c);
}

/* Where `autopar calibrate` recorded what it scaled and why: optional, but
 * whole when present, so that a plan can say its rates came from a run. */
static int parse_calibration(ctx *x, const cJSON *root, ap_cluster *c)
{
    static const char *const fields[] = {"scale", "measured_step_s", "from", NULL};
    const char *p = "calibration";
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, p);
    int rc = AP_OK;
    if (!k)
        return AP_OK;
    if (!cJSON_IsObject(k))
        return fail(x, p, "must be an object");
    if ((rc = check_fields(x, k, p, fields)) ||
        (rc = get_number(x, k, p, "scale", NUM_POSITIVE, 1, &c->calib_scale)) ||
        (rc = get_number(x, k, p, "measured_step_s", NUM_SECONDS, 1, &c->calib_measured_s)) ||
        (rc = get_string(x, k, p, "from", 1, c->calib_from, sizeof c->calib_from)))
        return rc;
    return AP_OK;
}

/* The smallest share of a peak an efficiency may state (NUM_FRACTION). */
#define MIN_EFFICIENCY 1e-3
/* How far above the stated peak a measured GEMM may run: 10%. The rate a
 * datasheet states is at one clock, and a GPU may run above it for a
 * short kernel (the H100 SXM's 989.4 TFLOP/s is 132 SMs x 4,096 FLOP per
 * clock at 1,830 MHz; its clock reaches 1,980 MHz, 8% more), and the
 * timer jitters by a few percent on the shortest samples. Real profiles
 * stay far below it: the measured H100 and H200 profiles in
 * examples/clusters reach at most 0.76 and 0.84 of the peak of any dtype
 * (the H200's TF32 GEMMs), so a real measurement keeps a margin of 30%
 * and more, while a table that would price a step above its peak (a
 * GEMM in a nanosecond) is refused. */
#define MAX_OVER_PEAK 1.10
/* How far above links.intra.bandwidth a measured collective's bus
 * bandwidth (nccl-tests' convention) may be: 4 times. No collective runs
 * faster than NVLink (costmodel/collective.c prices none faster either),
 * but the file states NVLink's achievable ring figure, not its line rate
 * (360 of 450 GB/s on an H100), and an in-network reduction (NVLS, SHARP)
 * sends each byte once where a ring sends it twice, which doubles an
 * all-reduce's bus bandwidth (460-480 GB/s measured on H100s beside the
 * ring's 360). 4 covers both with room to spare; a table faster than that
 * is a mistake, not a measurement. */
#define MAX_OVER_LINK 4.0
/* What a measured sample may take beyond its work at the least efficiency
 * a file may state (MIN_EFFICIENCY of the peak or of the link): a launch
 * and tail, far above the few microseconds either takes, so that the
 * smallest real shapes, which launch time rules, stay well inside it. A
 * sample slower than that (a GEMM of 1024^3 in 1e29 s) is a typo, and
 * priced every step at years. */
#define LAUNCH_ALLOWANCE_S 1e-3

/* The tensor-core efficiencies a calibration scaled, with their fields. */
static int scaled_efficiencies(const ap_cluster *c, const char **names, double *eff)
{
    const char *all[] = {"gemm_efficiency", "gemm_efficiency_fp8", "attention_efficiency",
                         "attention_backward_efficiency"};
    const double v[] = {c->gemm_eff, c->gemm_eff_fp8, c->attn_eff, c->attn_bwd_eff};
    int n = 0;
    for (int i = 0; i < 4; i++)
        if (v[i] > 0) {
            names[n] = all[i];
            eff[n++] = v[i];
        }
    return n;
}

/* calibration.scale is the factor the file's tensor-core efficiencies were
 * scaled by from the kernel figures they started from (autopar calibrate
 * multiplies both by one factor, so each efficiency / scale is that kernel
 * figure, which ap_cluster_kernel_rate gives back). Those kernel figures
 * are efficiencies too, at most 1 of the peak and at least the smallest a
 * file may state: a scale outside that range is no calibration of this
 * file's figures. It matters beyond the record, since a measured GEMM's
 * multiply is divided by it: a scale of 1e9 priced a step at 168% of its
 * peak. */
static int check_calibration(ctx *x, const ap_cluster *c)
{
    const char *names[4];
    double eff[4];
    int n = scaled_efficiencies(c, names, eff);
    if (!(c->calib_scale > 0) || !n)
        return AP_OK;
    int hi = 0, lo = 0;
    for (int i = 1; i < n; i++) {
        hi = eff[i] > eff[hi] ? i : hi;
        lo = eff[i] < eff[lo] ? i : lo;
    }
    /* A relative 1e-9 for the rounding of a product written and read back. */
    double least = eff[hi] * (1 - 1e-9), most = eff[lo] / MIN_EFFICIENCY * (1 + 1e-9);
    if (c->calib_scale >= least && c->calib_scale <= most)
        return AP_OK;
    int at = c->calib_scale < least ? hi : lo;
    return fail(x, "calibration.scale", "%g is outside [%.4g, %.4g]: it would have the "
                "kernels the efficiencies were scaled from run at gpu.%s %.4g / %g = %.3g "
                "of peak, where an efficiency is from %g to 1", c->calib_scale, eff[hi],
                eff[lo] / MIN_EFFICIENCY, names[at], eff[at], c->calib_scale,
                eff[at] / c->calib_scale, MIN_EFFICIENCY);
}

/* A length factor multiplies an efficiency (compute.c,
 * ap_attention_length_factor), and the product is the share of the peak
 * attention runs at: like an efficiency it must be at least
 * MIN_EFFICIENCY. A factor of 1e-320 priced attention at infinity and
 * crashed the planner. */
static int check_curve_row(ctx *x, const ap_cluster *c, const char *row,
                           const double *f, const char *eff_name, double eff)
{
    for (int i = 0; i < c->attn_len_n; i++) {
        if (f[i] * eff >= MIN_EFFICIENCY)
            continue;
        char p[PATH_LEN];
        snprintf(p, sizeof p, "gpu.attention_by_length.%s[%d]", row, i);
        return fail(x, p, "%g x gpu.%s %g is %.3g of peak; a factor times its "
                    "efficiency must be at least %g, as an efficiency is", f[i], eff_name,
                    eff, f[i] * eff, MIN_EFFICIENCY);
    }
    return AP_OK;
}

static int check_attn_curve(ctx *x, const ap_cluster *c)
{
    const char *fwd_name = c->attn_eff > 0 ? "attention_efficiency" : "gemm_efficiency";
    double fwd = c->attn_eff > 0 ? c->attn_eff : c->gemm_eff;
    const char *bwd_name = c->attn_bwd_eff > 0 ? "attention_backward_efficiency" : fwd_name;
    double bwd = c->attn_bwd_eff > 0 ? c->attn_bwd_eff : fwd;
    int rc;
    if ((rc = check_curve_row(x, c, "forward_causal", c->attn_len_causal, fwd_name, fwd)) ||
        (rc = check_curve_row(x, c, "forward_noncausal", c->attn_len_noncausal, fwd_name,
                              fwd)))
        return rc;
    return check_curve_row(x, c, "backward", c->attn_len_bwd, bwd_name, bwd);
}

/* The peak a GEMM of dtype dt is priced against (compute.c's peak_for):
 * its own, or bf16's where the file states none (fp8 on an A100). */
static double peak_of(const ap_cluster *c, ap_dtype dt, const char **name)
{
    int own = c->peak_flops[dt] > 0;
    *name = ap_dtype_name(own ? dt : AP_BF16);
    return own ? c->peak_flops[dt] : c->peak_flops[AP_BF16];
}

/* A measured GEMM runs at most at its peak (MAX_OVER_PEAK), and so it does
 * as priced at the training-step rate: a scale above 1 divides its
 * multiply by the scale (compute.c, measured_ratio), and the cost model's
 * own price at the sample's shape says how fast that runs it. The price
 * is taken on a copy of the cluster whose table is that sample alone, so
 * that a table of many samples costs one lookup each. */
static int check_gemm_samples(ctx *x, const ap_cluster *c)
{
    ap_cluster one = *c;
    one.ngemm = 1;
    for (int i = 0; i < c->ngemm; i++) {
        const ap_gemm_sample *s = &c->gemm[i];
        const char *pk;
        double peak = peak_of(c, s->dtype, &pk);
        double flops = 2 * s->m * s->n * s->k, rate = flops / s->seconds, priced = 0;
        char p[PATH_LEN];
        snprintf(p, sizeof p, "measured.gemm[%d].seconds", i);
        if (rate > MAX_OVER_PEAK * peak)
            return fail(x, p, "%g x %g x %g %s in %g s is %.4g TFLOP/s, %.3g x "
                        "gpu.peak_flops.%s (%.4g TFLOP/s); a measured GEMM runs at most "
                        "%.0f%% above its peak", s->m, s->n, s->k,
                        ap_dtype_name(s->dtype), s->seconds, rate / 1e12, rate / peak, pk,
                        peak / 1e12, (MAX_OVER_PEAK - 1) * 100);
        double slowest = flops / (MIN_EFFICIENCY * peak) + LAUNCH_ALLOWANCE_S;
        if (s->seconds > slowest)
            return fail(x, p, "%g x %g x %g %s in %g s is %.3g x gpu.peak_flops.%s; a "
                        "measured GEMM runs at %g of its peak or faster, plus a %g s "
                        "launch (%.4g s here)", s->m, s->n, s->k, ap_dtype_name(s->dtype),
                        s->seconds, rate / peak, pk, MIN_EFFICIENCY, LAUNCH_ALLOWANCE_S,
                        slowest);
        one.gemm = &c->gemm[i];
        if (c->calib_scale > 1)
            priced = flops / ap_cost_gemm(&one, s->dtype, s->m, s->n, s->k);
        if (priced > MAX_OVER_PEAK * peak)
            return fail(x, "calibration.scale", "%g prices measured.gemm[%d] (%g x %g x %g "
                        "%s, measured at %.4g TFLOP/s) at %.3g x gpu.peak_flops.%s",
                        c->calib_scale, i, s->m, s->n, s->k, ap_dtype_name(s->dtype),
                        rate / 1e12, priced / peak, pk);
    }
    return AP_OK;
}

/* The longest a collective may take: its bus bytes over the slowest link
 * it crosses at MIN_EFFICIENCY, a latency for each of a ring's steps, and
 * a launch. */
static double slowest_collective(const ap_cluster *c, const ap_coll_sample *s)
{
    double bw = s->nodes > 1 ? fmin(c->intra_bw, c->inter_bw) : c->intra_bw;
    double lat = s->nodes > 1 ? fmax(c->intra_lat, c->inter_lat) : c->intra_lat;
    return ap_coll_bus_factor(s->op, s->ranks) * s->bytes / (MIN_EFFICIENCY * bw) +
           2.0 * (s->ranks - 1) * lat + LAUNCH_ALLOWANCE_S;
}

/* A measured collective's bus bandwidth stays within MAX_OVER_LINK of
 * NVLink's, and its time within slowest_collective. */
static int check_coll_samples(ctx *x, const ap_cluster *c)
{
    for (int i = 0; i < c->ncoll; i++) {
        const ap_coll_sample *s = &c->coll[i];
        double bus = ap_coll_bus_factor(s->op, s->ranks) * s->bytes / s->seconds;
        double slowest = slowest_collective(c, s);
        char p[PATH_LEN];
        snprintf(p, sizeof p, "measured.collectives[%d].seconds", i);
        if (s->seconds > slowest)
            return fail(x, p, "%s of %g bytes over %d ranks in %g s; its links at %g "
                        "of their bandwidth, a latency a step and a %g s launch take "
                        "%.4g s", ap_coll_name(s->op), s->bytes, s->ranks, s->seconds,
                        MIN_EFFICIENCY, LAUNCH_ALLOWANCE_S, slowest);
        if (bus <= MAX_OVER_LINK * c->intra_bw)
            continue;
        return fail(x, p, "%s of %g bytes over %d ranks in %g s is a bus bandwidth of "
                    "%.4g GB/s, %.3g x links.intra.bandwidth (%.4g GB/s); no collective "
                    "runs more than %g times faster than NVLink's figure",
                    ap_coll_name(s->op), s->bytes, s->ranks, s->seconds, bus / 1e9,
                    bus / c->intra_bw, c->intra_bw / 1e9, MAX_OVER_LINK);
    }
    return AP_OK;
}

static int parse_root(ctx *x, const cJSON *root, ap_cluster *c)
{
    static const char *const fields[] = {"format", "name", "nodes",
                                         "gpus_per_node", "gpu", "links",
                                         "measured", "calibration", NULL};
    char format[32] = "";
    int rc;
    if (!cJSON_IsObject(root))
        return fail(x, "", "must be a JSON object");
    const char *kind = ap_json_kind(root);
    if (kind && strncmp(kind, "a cluster", 9))
        return fail(x, "", "this is %s, not a cluster file (\"format\": \"" FORMAT "\"): "
                    "--cluster takes a preset (%s) or a cluster file", kind,
                    ap_cluster_preset_names());
    if ((rc = check_fields(x, root, "", fields)) ||
        (rc = get_string(x, root, "", "format", 1, format, sizeof format)))
        return rc;
    if (strcmp(format, FORMAT))
        return fail(x, "format", "must be \"" FORMAT "\", not \"%s\"", format);
    if ((rc = get_string(x, root, "", "name", 1, c->name, sizeof c->name)) ||
        (rc = get_int(x, root, "", "nodes", 1, 100000, 1, &c->nodes)) ||
        (rc = get_int(x, root, "", "gpus_per_node", 1, 1024, 1, &c->gpus_per_node)) ||
        (rc = parse_gpu(x, root, c)) || (rc = parse_links(x, root, c)) ||
        (rc = parse_measured(x, root, c)) || (rc = parse_calibration(x, root, c)))
        return rc;
    if ((double)c->nodes * c->gpus_per_node > 1000000)
        return fail(x, "nodes", "more than 1000000 GPUs in all");
    /* Figures each in range can still price faster than the GPU can run. */
    if ((rc = check_calibration(x, c)) || (rc = check_attn_curve(x, c)) ||
        (rc = check_gemm_samples(x, c)))
        return rc;
    return check_coll_samples(x, c);
}

static int json_line(const char *text, const char *at)
{
    int line = 1;
    for (const char *p = text; at && p < at && *p; p++)
        line += *p == '\n';
    return line;
}

static int parse_text(const char *text, size_t len, const char *file,
                      ap_cluster *c, char *err)
{
    ctx x = {file, err};
    const char *end = NULL;
    size_t bad = ap_json_control_byte(text, len);
    char what[96];
    if (bad < len)
        return fail(&x, "", "not valid JSON (line %d): %s", json_line(text, text + bad),
                    ap_json_control_what(text, bad, what, sizeof what));
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    size_t extra = root ? ap_json_trailing(text, len, end) : 0;
    if (extra) {
        cJSON_Delete(root);
        return fail(&x, "", "not valid JSON (line %d): text after the closing '}'",
                    json_line(text, text + extra));
    }
    if (!root && ap_json_too_deep(text, len))
        return fail(&x, "", "not valid JSON: arrays and objects nested deeper than %d "
                    "levels", AP_JSON_MAX_DEPTH);
    if (!root)
        return fail(&x, "", "not valid JSON (line %d)", json_line(text, end));
    snprintf(c->source, sizeof c->source, "%s", file);
    int rc = parse_root(&x, root, c);
    cJSON_Delete(root);
    if (rc != AP_OK)
        ap_cluster_free(c);
    return rc;
}

int ap_cluster_parse(const char *text, size_t len, const char *source,
                     int gpus, int gpus_per_node, ap_cluster *c, char *err)
{
    memset(c, 0, sizeof *c);
    int rc = parse_text(text, len, source ? source : "(cluster)", c, err);
    if (rc == AP_OK && (rc = ap_cluster_set_size(c, gpus, gpus_per_node, err)))
        ap_cluster_free(c);
    return rc;
}

int ap_cluster_load(const char *path, int gpus, int gpus_per_node,
                    ap_cluster *c, char *err)
{
    char *text = NULL;
    size_t len = 0;
    memset(c, 0, sizeof *c);
    int rc = ap_read_file(path, &text, &len, err);
    if (rc != AP_OK)
        return rc;
    rc = ap_cluster_parse(text, len, path, gpus, gpus_per_node, c, err);
    free(text);
    return rc;
}

static cJSON *peaks_json(const ap_cluster *c)
{
    static const ap_dtype order[] = {AP_BF16, AP_FP16, AP_FP32, AP_FP8};
    cJSON *pk = cJSON_CreateObject();
    for (int i = 0; i < 4; i++)
        if (c->peak_flops[order[i]] > 0)
            cJSON_AddNumberToObject(pk, ap_dtype_name(order[i]),
                                    c->peak_flops[order[i]]);
    return pk;
}

/* cJSON prints a number in 15 digits when that reads back within an
 * epsilon, which is not always the same double; a curve's factors are
 * quotients (529/989.4 ...) and must read back exactly, so 17 digits. */
static cJSON *exact_array(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    char num[32];
    for (int i = 0; i < n; i++) {
        snprintf(num, sizeof num, "%.17g", v[i]);
        cJSON_AddItemToArray(a, cJSON_CreateRaw(num));
    }
    return a;
}

static cJSON *curve_json(const ap_cluster *c)
{
    cJSON *a = cJSON_CreateObject();
    int n = c->attn_len_n;
    cJSON_AddItemToObject(a, "lengths", exact_array(c->attn_len, n));
    cJSON_AddItemToObject(a, "forward_causal", exact_array(c->attn_len_causal, n));
    cJSON_AddItemToObject(a, "forward_noncausal", exact_array(c->attn_len_noncausal, n));
    cJSON_AddItemToObject(a, "backward", exact_array(c->attn_len_bwd, n));
    return a;
}

/* cJSON writes 15 significant digits when they read back within a
 * relative epsilon, which can lose the last bit; efficiencies are products
 * (a calibration's factor times a kernel figure), and a file must give back
 * the cluster it was written from, so they get as many digits as that
 * takes. */
static void add_exact(cJSON *o, const char *key, double v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.15g", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, sizeof buf, "%.17g", v);
    if (isfinite(v))
        cJSON_AddRawToObject(o, key, buf);
    else
        cJSON_AddNullToObject(o, key);
}

static cJSON *gpu_json(const ap_cluster *c)
{
    cJSON *g = cJSON_CreateObject();
    cJSON_AddStringToObject(g, "name", c->gpu_name);
    cJSON_AddNumberToObject(g, "sms", c->sms);
    cJSON_AddNumberToObject(g, "memory_bytes", c->hbm_bytes);
    cJSON_AddNumberToObject(g, "reserved_bytes", c->mem_reserved);
    cJSON_AddNumberToObject(g, "hbm_bandwidth", c->hbm_bw);
    cJSON_AddNumberToObject(g, "hbm_efficiency", c->hbm_eff);
    add_exact(g, "gemm_efficiency", c->gemm_eff);
    if (c->gemm_eff_fp8 > 0)
        add_exact(g, "gemm_efficiency_fp8", c->gemm_eff_fp8);
    if (c->attn_eff > 0)
        add_exact(g, "attention_efficiency", c->attn_eff);
    if (c->attn_bwd_eff > 0)
        add_exact(g, "attention_backward_efficiency", c->attn_bwd_eff);
    if (c->attn_len_n > 0 && c->attn_len_n <= AP_ATTN_LEN_MAX)
        cJSON_AddItemToObject(g, "attention_by_length", curve_json(c));
    if (c->tile_m > 0 && c->tile_n > 0) {
        int tile[2] = {c->tile_m, c->tile_n};
        cJSON_AddItemToObject(g, "gemm_tile", cJSON_CreateIntArray(tile, 2));
    }
    cJSON_AddNumberToObject(g, "kernel_floor_s", c->kernel_floor);
    cJSON_AddItemToObject(g, "peak_flops", peaks_json(c));
    return g;
}

static cJSON *link_json(double bw, double lat)
{
    cJSON *l = cJSON_CreateObject();
    cJSON_AddNumberToObject(l, "bandwidth", bw);
    cJSON_AddNumberToObject(l, "latency_s", lat);
    return l;
}

static cJSON *gemm_json(const ap_gemm_sample *s)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "dtype", ap_dtype_name(s->dtype));
    cJSON_AddNumberToObject(e, "m", s->m);
    cJSON_AddNumberToObject(e, "n", s->n);
    cJSON_AddNumberToObject(e, "k", s->k);
    cJSON_AddNumberToObject(e, "seconds", s->seconds);
    cJSON_AddNumberToObject(e, "tflops", 2 * s->m * s->n * s->k / s->seconds / 1e12);
    return e;
}

static cJSON *coll_json(const ap_coll_sample *s)
{
    cJSON *e = cJSON_CreateObject();
    double algbw = s->bytes / s->seconds;
    cJSON_AddStringToObject(e, "op", ap_coll_name(s->op));
    cJSON_AddNumberToObject(e, "ranks", s->ranks);
    cJSON_AddNumberToObject(e, "nodes", s->nodes);
    cJSON_AddNumberToObject(e, "bytes", s->bytes);
    cJSON_AddNumberToObject(e, "seconds", s->seconds);
    cJSON_AddNumberToObject(e, "algbw", algbw);
    cJSON_AddNumberToObject(e, "busbw", algbw * ap_coll_bus_factor(s->op, s->ranks));
    return e;
}

static cJSON *measured_json(const ap_cluster *c)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "date", c->measured_date);
    cJSON_AddStringToObject(m, "command", c->measured_command);
    if (c->measured_gemm_timing[0])
        cJSON_AddStringToObject(m, "gemm_timing", c->measured_gemm_timing);
    if (c->hbm_bw_measured > 0)
        cJSON_AddNumberToObject(m, "hbm_bandwidth", c->hbm_bw_measured);
    cJSON *g = cJSON_AddArrayToObject(m, "gemm");
    for (int i = 0; i < c->ngemm; i++)
        cJSON_AddItemToArray(g, gemm_json(&c->gemm[i]));
    cJSON *k = cJSON_AddArrayToObject(m, "collectives");
    for (int i = 0; i < c->ncoll; i++)
        cJSON_AddItemToArray(k, coll_json(&c->coll[i]));
    return m;
}

char *ap_cluster_to_json(const ap_cluster *c)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    cJSON_AddStringToObject(root, "format", FORMAT);
    cJSON_AddStringToObject(root, "name", c->name);
    cJSON_AddNumberToObject(root, "nodes", c->nodes);
    cJSON_AddNumberToObject(root, "gpus_per_node", c->gpus_per_node);
    cJSON_AddItemToObject(root, "gpu", gpu_json(c));
    cJSON *links = cJSON_AddObjectToObject(root, "links");
    cJSON_AddItemToObject(links, "intra", link_json(c->intra_bw, c->intra_lat));
    cJSON_AddItemToObject(links, "inter", link_json(c->inter_bw, c->inter_lat));
    if (c->has_measured || c->ngemm || c->ncoll || c->hbm_bw_measured > 0)
        cJSON_AddItemToObject(root, "measured", measured_json(c));
    if (c->calib_scale > 0) {
        cJSON *k = cJSON_AddObjectToObject(root, "calibration");
        add_exact(k, "scale", c->calib_scale);
        cJSON_AddNumberToObject(k, "measured_step_s", c->calib_measured_s);
        cJSON_AddStringToObject(k, "from", c->calib_from);
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}
