/* libFuzzer target: infergate:data's "p" messages (fuzz_redis_data.h). */
#define FUZZ_DATA_KIND 'p'
#include "fuzz_redis_data.h"
