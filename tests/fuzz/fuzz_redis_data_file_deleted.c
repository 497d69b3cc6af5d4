/* libFuzzer target: infergate:data's "d" messages (fuzz_redis_data.h). */
#define FUZZ_DATA_KIND 'd'
#include "fuzz_redis_data.h"
