/* The README's settings table, generated from the one parameter table (comm/params.h): test_params
 * checks the README against it and prints it (`test_params markdown`). Tool code: not in the library. */
#ifndef RELAY_TOOLS_PARAMS_MD_H_
#define RELAY_TOOLS_PARAMS_MD_H_

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One markdown row per setting: variable, config field, default, values, scope, meaning. */
void relayParamsMarkdown(FILE* f);

#ifdef __cplusplus
}
#endif
#endif
