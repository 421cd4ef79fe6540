/* rc_modules.c -- the module lists of Megatron-LM's --recompute-modules:
 * which a run's selective recomputation redoes, read from a list and
 * written back in Megatron-Core's order. What recomputing a module costs
 * and frees is priced with the ops (strategy.c, block.c). */
#include <stdio.h>
#include <string.h>

#include "planner/planner.h"

unsigned ap_run_rc_modules(const ap_run_settings *r)
{
    return r->recompute_modules ? r->recompute_modules : AP_MODULE_CORE_ATTN;
}

unsigned ap_rc_modules_setting(unsigned modules)
{
    return modules == AP_MODULE_CORE_ATTN ? 0 : modules;
}

int ap_rc_modules_parse(const char *list, const char *seps, unsigned *out, char *err)
{
    char buf[256];
    if (strlen(list) >= sizeof buf) {
        snprintf(err, AP_ERR_LEN, "the module list is too long");
        return AP_EINPUT;
    }
    strcpy(buf, list);
    unsigned m = 0;
    for (char *save = NULL, *tok = strtok_r(buf, seps, &save); tok;
         tok = strtok_r(NULL, seps, &save)) {
        unsigned bit = ap_module_from_name(tok);
        if (!bit) {
            snprintf(err, AP_ERR_LEN, "unknown module \"%.64s\" (" AP_MODULE_NAMES ")", tok);
            return AP_EINPUT;
        }
        m |= bit;
    }
    if (!m) {
        snprintf(err, AP_ERR_LEN, "names no module");
        return AP_EINPUT;
    }
    *out = m;
    return AP_OK;
}

void ap_rc_modules_format(unsigned modules, const char *sep, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < AP_MODULE_COUNT && n < len; i++)
        if (modules & 1u << i)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? sep : "",
                                  ap_module_name(1u << i));
}

int ap_rc_modules_check(const ap_graph *g, const ap_run_settings *r, char *err)
{
    unsigned mods = r->recompute_modules, seen = ap_graph_modules(g);
    const char *why = NULL;
    if (r->fp8 && r->fp8_recipe == AP_FP8_DELAYED &&
        (mods & (AP_MODULE_MOE_ACT | AP_MODULE_LAYERNORM)))
        why = "moe_act and layernorm need an FP8 recipe other than delayed scaling "
              "(fp8_recipe=tensorwise, --fp8-recipe tensorwise); Megatron-Core refuses "
              "them under it";
    else if ((mods & AP_MODULE_MLA_UP_PROJ) && !(seen & AP_MODULE_MLA_UP_PROJ))
        why = "mla_up_proj needs multi-latent attention, which the model has not "
              "(Megatron-Core refuses it without)";
    else if ((mods & AP_MODULE_MOE) && r->moe_a2a_overlap)
        why = "moe cannot run with the expert all-to-all overlap "
              "(moe_a2a_overlap, --overlap-moe-expert-parallel-comm), as "
              "Megatron-Core asserts";
    else if ((mods & AP_MODULE_SHARED_EXPERTS) && r->shared_overlap)
        why = "shared_experts cannot run with --moe-shared-expert-overlap "
              "(shared_overlap), as Megatron-Core asserts";
    else if ((mods & AP_MODULE_LAYERNORM) && r->shared_overlap)
        why = "under --moe-shared-expert-overlap (shared_overlap) Megatron-Core skips "
              "the MoE layers' norm, which autopar does not price apart";
    if (!why)
        return AP_OK;
    char list[160];
    ap_rc_modules_format(mods, "+", list, sizeof list);
    snprintf(err, AP_ERR_LEN, "recompute_modules=%s (--recompute-modules): %s", list, why);
    return AP_EINPUT;
}

int ap_auto_module_sets(const ap_graph *g, const ap_run_settings *r, unsigned *sets)
{
    unsigned seen = ap_graph_modules(g);
    unsigned moe = AP_MODULE_MOE_ACT | AP_MODULE_LAYERNORM;
    if (r->fp8 && r->fp8_recipe == AP_FP8_DELAYED)
        moe = 0; /* Megatron-Core refuses them under delayed scaling */
    const unsigned each[3] = {AP_MODULE_MLP, moe, AP_MODULE_MLA_UP_PROJ};
    unsigned all = 0;
    int n = 0;
    for (int i = 0; i < 3; i++)
        if (each[i] && (seen & each[i])) {
            sets[n++] = each[i] & seen;
            all |= each[i] & seen;
        }
    if (n > 1)
        sets[n++] = all;
    return n;
}
