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
  int32_t head[11];
  unsigned char* arrays;
  relayPlan* plan;
} cacheEntry;

struct relayPlanCache {
  cacheEntry e[PLAN_CACHE_ENTRIES];
  uint64_t clock;
};

static void keyHead(const planKey* k, int32_t head[11]) {
  head[0] = (int32_t)k->coll;
  head[1] = k->nranks;
  head[2] = k->nGroups;
  head[3] = k->nActive;
  head[4] = (int32_t)k->dtype;
  head[5] = (int32_t)k->op;
  head[6] = k->route;
  head[7] = k->depth;
  head[8] = k->root;
  head[9] = (int32_t)k->bwTileBytes;
  head[10] = k->bwRing;
}

/* The key hashed in place (no serialized copy per call). */
static uint64_t keyHash(const int32_t head[11], const planKey* k) {
  return planKeyArraysHash(relayHash64(RELAY_HASH_SEED, head, 11 * sizeof(int32_t)), k);
}

struct relayPlanCache* relayPlanCacheNew(void) { return calloc(1, sizeof(struct relayPlanCache)); }

void relayPlanCacheFree(struct relayPlanCache* c) {
  if (!c) return;
  for (int i = 0; i < PLAN_CACHE_ENTRIES; i++) {
    free(c->e[i].arrays);
    relayPlanFree(c->e[i].plan);
  }
  free(c);
}

const relayPlan* relayPlanCacheFind(struct relayPlanCache* c, const planKey* key) {
  int32_t head[11];
  keyHead(key, head);
  const uint64_t h = keyHash(head, key);
  for (int i = 0; i < PLAN_CACHE_ENTRIES; i++) {
    cacheEntry* e = &c->e[i];
    /* Equal heads fix the arrays' lengths. */
    if (e->plan && e->hash == h && !memcmp(e->head, head, sizeof head) && planKeyArraysEqual(e->arrays, key)) {
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
  keyHead(key, e->head);
  e->arrays = arrays;
  e->hash = keyHash(e->head, key);
  e->plan = plan;
  e->lastUse = ++c->clock;
  return 0;
}
