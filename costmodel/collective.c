/* collective.c -- alpha-beta costs of NCCL collectives with the nccl-tests
 * bus-bandwidth conventions, overridden by measured tables. */
#include <math.h>

#include "costmodel/costmodel.h"

double ap_coll_bus_factor(ap_coll op, int ranks)
{
    if (ranks <= 1)
        return 0;
    double n = ranks;
    switch (op) {
    case AP_COLL_ALLREDUCE:
        return 2 * (n - 1) / n;
    case AP_COLL_ALLGATHER:
    case AP_COLL_REDUCESCATTER:
    case AP_COLL_ALLTOALL:
        return (n - 1) / n;
    default:
        return 1;
    }
}

/* A group inside one node runs at the NVLink bus bandwidth. A group across
 * nodes has ranks/nodes GPUs per node, each driving its own NIC rail, so
 * its traffic between nodes flows over that many rails at once; it never
 * goes faster than NVLink. */
static double bus_bandwidth(const ap_cluster *c, int ranks, int nodes)
{
    if (nodes <= 1)
        return c->intra_bw;
    return fmin(c->intra_bw, c->inter_bw * ranks / nodes);
}

/* NCCL's ring latency model (src/graph/tuning.cc): one hop latency per ring
 * step, the steps that cross nodes paying the network's. */
static double latency(const ap_cluster *c, ap_coll op, int ranks, int nodes)
{
    int steps, inter;
    switch (op) {
    case AP_COLL_ALLREDUCE:
        steps = 2 * (ranks - 1);
        inter = 2 * (nodes - 1);
        break;
    case AP_COLL_SENDRECV:
        steps = 1;
        inter = nodes > 1;
        break;
    default:
        steps = ranks - 1;
        inter = nodes - 1;
        break;
    }
    return (steps - inter) * c->intra_lat + inter * c->inter_lat;
}

/* An all-to-all is no ring: each rank sends its own share to every other
 * rank directly. What leaves the node, (ranks - g)/ranks of a rank's
 * buffer with g of the group's ranks on each node, goes out through that
 * rank's own rail (NCCL's PXN moves it over NVLink to the GPU on the
 * destination's rail first, which keeps each NIC's load the same); the
 * share for its own node's ranks crosses NVLink meanwhile. Spreading it
 * over the node's rails, as a ring's bandwidth is, would price it g times
 * too fast. */
static double alltoall_across_nodes(const ap_cluster *c, int ranks, int nodes,
                                    double bytes)
{
    double n = ranks, g = (double)ranks / nodes;
    double off = (n - g) / n * bytes / c->inter_bw;
    double on = (g - 1) / n * bytes / c->intra_bw;
    return fmax(off, on);
}

static double analytic(const ap_cluster *c, ap_coll op, int ranks, int nodes,
                       double bytes)
{
    if (op == AP_COLL_ALLTOALL && nodes > 1)
        return latency(c, op, ranks, nodes) + alltoall_across_nodes(c, ranks, nodes, bytes);
    return latency(c, op, ranks, nodes) +
           ap_coll_bus_factor(op, ranks) * bytes / bus_bandwidth(c, ranks, nodes);
}

/* Interpolates the samples of (op, ranks, nodes) in log(time) over
 * log(bytes). Below the smallest sample the time is clamped (latency
 * dominates); above the largest it grows linearly at that sample's bus
 * bandwidth. Returns -1 when no sample matches. */
static double measured(const ap_cluster *c, ap_coll op, int ranks, int nodes,
                       double bytes)
{
    const ap_coll_sample *lo = NULL, *hi = NULL, *first = NULL, *last = NULL;
    for (int i = 0; i < c->ncoll; i++) {
        const ap_coll_sample *s = &c->coll[i];
        if (s->op != op || s->ranks != ranks || s->nodes != nodes)
            continue;
        if (!first || s->bytes < first->bytes)
            first = s;
        if (!last || s->bytes > last->bytes)
            last = s;
        if (s->bytes <= bytes && (!lo || s->bytes > lo->bytes))
            lo = s;
        if (s->bytes >= bytes && (!hi || s->bytes < hi->bytes))
            hi = s;
    }
    if (!first)
        return -1;
    if (!lo)
        return first->seconds;
    if (!hi)
        return last->seconds * bytes / last->bytes;
    if (hi->bytes == lo->bytes)
        return lo->seconds;
    double f = log(bytes / lo->bytes) / log(hi->bytes / lo->bytes);
    return exp(log(lo->seconds) + f * log(hi->seconds / lo->seconds));
}

/* A group's nodes: at least one, at most one per rank. */
static int group_nodes(int ranks, int nodes)
{
    return nodes < 1 ? 1 : nodes > ranks ? ranks : nodes;
}

double ap_cost_collective(const ap_cluster *c, ap_coll op, int ranks, int nodes,
                          double bytes)
{
    if (ranks <= 1 || !(bytes > 0) || (int)op < 0 || op >= AP_NCOLL)
        return 0;
    nodes = group_nodes(ranks, nodes);
    double t = c->ncoll ? measured(c, op, ranks, nodes, bytes) : -1;
    return t >= 0 ? t : analytic(c, op, ranks, nodes, bytes);
}

double ap_cost_collective_bucketed(const ap_cluster *c, ap_coll op, int ranks, int nodes,
                                   double bytes, double bucket)
{
    if (!(bucket > 0))
        return ap_cost_collective(c, op, ranks, nodes, bytes);
    if (!(bytes > 0))
        return 0;
    return ap_cost_collective(c, op, ranks, nodes, bucket) * (bytes / bucket);
}

/* NCCL's LL protocol (src/graph/tuning.cc, baseLat and hwLat for LL):
 * base latency 3.6 us (ring) and 4.4 us (tree); per hop 0.47 us (ring) and
 * 0.52 us (tree) over NVLink, 1.8 times that once the group spans nodes,
 * and 2.7 us (ring) and 5.0 us (tree) over the network. */
#define LL_RING_BASE_S 3.6e-6
#define LL_TREE_BASE_S 4.4e-6
#define LL_RING_NVLINK_S 0.47e-6
#define LL_TREE_NVLINK_S 0.52e-6
#define LL_ACROSS_NODES 1.8
#define LL_RING_NET_S 2.7e-6
#define LL_TREE_NET_S 5.0e-6

static int log2_floor(int n)
{
    int l = 0;
    while (n >>= 1)
        l++;
    return l;
}

/* The latencies NCCL's tuning model gives an LL all-reduce: the ring's
 * 2(n-1) steps, 2N of them across the network when the group spans N
 * nodes, or the tree's climb through a node's n/N ranks and log2(N) network
 * levels and back; NCCL runs the faster. */
static double allreduce_ll(int ranks, int nodes)
{
    double across = nodes > 1 ? LL_ACROSS_NODES : 1;
    int steps = 2 * (ranks - 1), inter = nodes > 1 ? 2 * nodes : 0;
    if (inter > steps)
        inter = steps;
    double ring = LL_RING_BASE_S + (steps - inter) * LL_RING_NVLINK_S * across +
                  inter * LL_RING_NET_S;
    double tree = LL_TREE_BASE_S + 2 * ((ranks / nodes - 1) * LL_TREE_NVLINK_S * across +
                                        log2_floor(nodes) * LL_TREE_NET_S);
    return fmin(ring, tree);
}

double ap_cost_allreduce_small(const ap_cluster *c, int ranks, int nodes, double bytes)
{
    if (ranks <= 1 || !(bytes > 0))
        return 0;
    nodes = group_nodes(ranks, nodes);
    double t = c->ncoll ? measured(c, AP_COLL_ALLREDUCE, ranks, nodes, bytes) : -1;
    return t >= 0 ? t : allreduce_ll(ranks, nodes);
}

double ap_cost_allreduce(const ap_cluster *c, int ranks, int nodes, double bytes)
{
    return ap_cost_collective(c, AP_COLL_ALLREDUCE, ranks, nodes, bytes);
}

double ap_cost_allgather(const ap_cluster *c, int ranks, int nodes, double bytes)
{
    return ap_cost_collective(c, AP_COLL_ALLGATHER, ranks, nodes, bytes);
}

double ap_cost_reducescatter(const ap_cluster *c, int ranks, int nodes, double bytes)
{
    return ap_cost_collective(c, AP_COLL_REDUCESCATTER, ranks, nodes, bytes);
}

double ap_cost_alltoall(const ap_cluster *c, int ranks, int nodes, double bytes)
{
    return ap_cost_collective(c, AP_COLL_ALLTOALL, ranks, nodes, bytes);
}

double ap_route_hit(double experts, double held, int top_k)
{
    if (held >= experts)
        return 1;
    double miss = 1;
    for (int i = 0; i < top_k && miss > 0; i++)
        miss *= fmax(experts - held - i, 0) / (experts - i);
    return 1 - miss;
}

static double choose(double n, double k)
{
    if (k < 0 || k > n)
        return 0;
    double r = 1;
    for (int i = 0; i < k; i++)
        r *= (n - i) / (i + 1);
    return r;
}

double ap_route_hit_groups(double experts, double held, int top_k, int groups, int group_topk)
{
    if (groups <= 1 || group_topk >= groups)
        return ap_route_hit(experts, held, top_k);
    double per = experts / groups, pool = per * group_topk;
    if (held <= per)
        return (double)group_topk / groups * ap_route_hit(pool, held, top_k);
    /* Whole groups: i of the set's j among the token's groups, then its
     * top_k within their experts. */
    int j = (int)fmin(round(held / per), groups);
    double miss = 0, all = choose(groups, group_topk);
    for (int i = 0; i <= j && i <= group_topk; i++)
        miss += choose(j, i) * choose(groups - j, group_topk - i) / all *
                (1 - ap_route_hit(pool, i * per, top_k));
    return 1 - miss;
}

double ap_cost_deepep(const ap_cluster *c, int ranks, int nodes, const ap_routing *r,
                      double token_bytes)
{
    if (ranks <= 1 || !(token_bytes > 0) || !(r->experts > 0) || r->top_k < 1)
        return 0;
    if (nodes < 1)
        nodes = 1;
    if (nodes > ranks)
        nodes = ranks;
    double g = (double)ranks / nodes;
    double node_hit = ap_route_hit_groups(r->experts, r->experts / nodes, r->top_k,
                                          r->groups, r->group_topk);
    double rank_hit = ap_route_hit_groups(r->experts, r->experts / ranks, r->top_k,
                                          r->groups, r->group_topk);
    double rdma = token_bytes * (nodes - 1) * node_hit / c->inter_bw;
    double nvlink = token_bytes * (g - 1) * rank_hit * nodes / c->intra_bw;
    return latency(c, AP_COLL_ALLTOALL, ranks, nodes) + fmax(rdma, nvlink);
}

/* A point-to-point transfer between two GPUs, in one node or across two. */
double ap_cost_sendrecv(const ap_cluster *c, int nodes, double bytes)
{
    return ap_cost_collective(c, AP_COLL_SENDRECV, 2, nodes > 1 ? 2 : 1, bytes);
}
