#include "params_md.h"

#include "comm/params.h"

void relayParamsMarkdown(FILE* f) {
  fprintf(f, "| variable | config field | default | values | scope | meaning |\n|---|---|---|---|---|---|\n");
  for (int i = 0; i < RELAY_P_COUNT; i++) {
    const relayParamDef* d = &relayParamDefs[i];
    const char* name = relayParamFieldName((relayParamId)i);
    char field[32] = "", allowed[160];
    if (name) snprintf(field, sizeof field, "`%s`", name);
    const char* values = relayParamAllowed((relayParamId)i, allowed, sizeof allowed);
    fprintf(f, "| `%s` | %s | %s | %s | %s | %s |\n", d->name, field, d->shownDefault, values,
            relayParamScopeName(d->scope), d->doc);
  }
}
