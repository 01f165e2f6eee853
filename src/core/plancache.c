#include "core/plancache.h"

#include <stdlib.h>
#include <string.h>

#include "comm/common.h"

/* 64 signatures: a training step issues a handful of distinct collective
 * shapes; more than 64 live at once would be unusual, and a miss only costs a
 * rebuild (microseconds for direct plans). */
#define PLAN_CACHE_ENTRIES 64

/* An entry keeps its own copy of the key: the fixed fields, then the ranks
 * and counts arrays (planKeyArraysDup). */
typedef struct {
  uint64_t hash;
  uint64_t lastUse;
  int32_t head[PLAN_KEY_WORDS];
  unsigned char* arrays;
  relayPlan* plan;
} cacheEntry;

struct relayPlanCache {
  cacheEntry e[PLAN_CACHE_ENTRIES];
  uint64_t clock;
};

struct relayPlanCache* relayPlanCacheNew(void) {
  return calloc(1, sizeof(struct relayPlanCache));
}

void relayPlanCacheFree(struct relayPlanCache* c) {
  if (!c) return;
  for (int i = 0; i < PLAN_CACHE_ENTRIES; i++) {
    free(c->e[i].arrays);
    relayPlanFree(c->e[i].plan);
  }
  free(c);
}

const relayPlan* relayPlanCacheFind(struct relayPlanCache* c, const planKey* key) {
  int32_t head[PLAN_KEY_WORDS];
  planKeyHead(key, head);
  const uint64_t h = planKeyHash(head, key);
  for (int i = 0; i < PLAN_CACHE_ENTRIES; i++) {
    cacheEntry* e = &c->e[i];
    /* Equal heads fix the arrays' lengths. */
    if (e->plan && e->hash == h && !memcmp(e->head, head, sizeof head) &&
        planKeyArraysEqual(e->arrays, key)) {
      e->lastUse = ++c->clock;
      return e->plan;
    }
  }
  return NULL;
}

int relayPlanCacheAdd(struct relayPlanCache* c, const planKey* key, relayPlan* plan) {
  unsigned char* arrays = planKeyArraysDup(key);
  if (!arrays) return -1;
  int victim = 0;
  for (int i = 0; i < PLAN_CACHE_ENTRIES; i++) {
    if (!c->e[i].plan) {
      victim = i;
      break;
    }
    if (c->e[i].lastUse < c->e[victim].lastUse) victim = i;
  }
  cacheEntry* e = &c->e[victim];
  free(e->arrays);
  relayPlanFree(e->plan);
  planKeyHead(key, e->head);
  e->arrays = arrays;
  e->hash = planKeyHash(e->head, key);
  e->plan = plan;
  e->lastUse = ++c->clock;
  return 0;
}
