/* kind.c -- what kind of file a JSON document is, so that a reader handed
 * another kind (a plan given as the model, a model as --cluster) says so,
 * rather than naming the first field it does not know. */
#include "graph/graph.h"

#include <cjson/cJSON.h>
#include <string.h>

const char *ap_json_kind(const struct cJSON *root)
{
    static const struct {
        const char *format, *kind;
    } kinds[] = {
        {"autopar-model/1", "a model (\"format\": \"autopar-model/1\")"},
        {"autopar-plan/1", "a plan (\"format\": \"autopar-plan/1\")"},
        {"autopar-cluster/1", "a cluster file (\"format\": \"autopar-cluster/1\")"},
    };
    if (!cJSON_IsObject(root))
        return NULL;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (cJSON_IsString(f)) {
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
            if (!strcmp(f->valuestring, kinds[i].format))
                return kinds[i].kind;
        return NULL;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "model_type"))
        return "a Hugging Face config (it has \"model_type\")";
    return NULL;
}
