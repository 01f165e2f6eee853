/* The environment of tools and tests: their own knobs (RELAYCC_GPUTEST_NRANKS, RELAYCC_BENCH_*), which
 * are not settings of the library. The library reads the environment only through its parameter table
 * (comm/params.h). */
#ifndef RELAY_TOOLS_TOOL_ENV_H_
#define RELAY_TOOLS_TOOL_ENV_H_

#ifdef __cplusplus
extern "C" {
#endif

/* name's value as an integer (strtol, any base), def when unset, empty or not a number. */
long relayEnvLong(const char* name, long def);
/* name's value, def when unset or empty. */
const char* relayEnvStr(const char* name, const char* def);

#ifdef __cplusplus
}
#endif
#endif
