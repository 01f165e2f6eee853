#include "tool_env.h"

#include <stdlib.h>

long relayEnvLong(const char* name, long def) {
  const char* v = getenv(name);
  if (!v || !*v) return def;
  char* end;
  long x = strtol(v, &end, 0);
  return (end == v) ? def : x;
}

const char* relayEnvStr(const char* name, const char* def) {
  const char* v = getenv(name);
  return (v && *v) ? v : def;
}
