/* bandwidth.c -- the nccl-tests conventions (doc/PERFORMANCE.md) that make a
 * measured collective comparable across group sizes and with the cost model:
 * the "size" of an operation, algorithm bandwidth, and bus bandwidth, which
 * for a ring is the bandwidth each link must sustain. */
#include <stddef.h>

#include "profiler/profiler.h"

double ap_profile_busbw_factor(ap_coll op, int ranks)
{
    if (ranks < 1)
        return 0;
    double n = ranks;
    switch (op) {
    case AP_COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
    case AP_COLL_ALLGATHER:
    case AP_COLL_REDUCESCATTER:
    case AP_COLL_ALLTOALL: return (n - 1) / n;
    case AP_COLL_SENDRECV: return 1.0;
    default: return 0;
    }
}

double ap_profile_algbw(double bytes, double seconds)
{
    return seconds > 0 ? bytes / seconds : 0;
}

double ap_profile_busbw(ap_coll op, int ranks, double bytes, double seconds)
{
    return ap_profile_algbw(bytes, seconds) * ap_profile_busbw_factor(op, ranks);
}

/* nccl-tests rounds the element count down to a multiple of the rank count
 * for the collectives that split the buffer among ranks; its "size" column is
 * then the larger of the send and receive buffers. */
int ap_profile_coll_shape_of(ap_coll op, int ranks, double bytes, size_t elem,
                             ap_profile_coll_shape *s)
{
    if (ranks < 1 || elem < 1 || bytes < (double)elem)
        return 0;
    size_t count = (size_t)(bytes / (double)elem);
    size_t n = (size_t)ranks;
    size_t per = count / n;
    switch (op) {
    case AP_COLL_ALLREDUCE:
    case AP_COLL_SENDRECV:
        s->send_count = s->recv_count = count;
        s->peer_count = op == AP_COLL_SENDRECV ? count : 0;
        break;
    case AP_COLL_ALLGATHER:
        s->send_count = per;
        s->recv_count = per * n;
        s->peer_count = per;
        break;
    case AP_COLL_REDUCESCATTER:
        s->send_count = per * n;
        s->recv_count = per;
        s->peer_count = per;
        break;
    case AP_COLL_ALLTOALL:
        s->send_count = s->recv_count = per * n;
        s->peer_count = per;
        break;
    default:
        return 0;
    }
    if (!s->send_count || !s->recv_count)
        return 0;
    size_t big = s->send_count > s->recv_count ? s->send_count : s->recv_count;
    s->bytes = (double)big * (double)elem;
    return 1;
}

/* The group whose samples describe a link: the most ranks, among all-reduce
 * samples inside one node or across nodes. */
static int pick_ranks(const ap_coll_sample *s, int n, int inter, int *nodes)
{
    int best = 0;
    for (int i = 0; i < n; i++) {
        if (s[i].op != AP_COLL_ALLREDUCE || (s[i].nodes > 1) != (inter != 0))
            continue;
        if (s[i].ranks > best || (s[i].ranks == best && s[i].nodes > *nodes)) {
            best = s[i].ranks;
            *nodes = s[i].nodes;
        }
    }
    return best;
}

int ap_profile_fit_link(const ap_coll_sample *s, int n, int inter,
                        ap_profile_link_fit *fit)
{
    int nodes = 0;
    int ranks = pick_ranks(s, n, inter, &nodes);
    if (ranks < 2)
        return 0;
    const ap_coll_sample *lo = NULL, *hi = NULL;
    for (int i = 0; i < n; i++) {
        if (s[i].op != AP_COLL_ALLREDUCE || s[i].ranks != ranks ||
            s[i].nodes != nodes || !(s[i].seconds > 0))
            continue;
        if (!lo || s[i].bytes < lo->bytes)
            lo = &s[i];
        if (!hi || s[i].bytes > hi->bytes)
            hi = &s[i];
    }
    if (!lo || lo->bytes >= hi->bytes)
        return 0;
    double f = ap_profile_busbw_factor(AP_COLL_ALLREDUCE, ranks);
    double dt = hi->seconds - lo->seconds;
    fit->ranks = ranks;
    fit->nodes = nodes;
    /* A slope that is not positive means the small message was the slower
     * one (noise); the large message's bus bandwidth with no latency is
     * then the honest answer. */
    if (dt <= 0) {
        fit->busbw = f * hi->bytes / hi->seconds;
        fit->alpha = 0;
        return 1;
    }
    fit->busbw = f * (hi->bytes - lo->bytes) / dt;
    double a = lo->seconds - f * lo->bytes / fit->busbw;
    fit->alpha = a > 0 ? a : 0;
    return 1;
}
