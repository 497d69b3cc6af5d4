/* libFuzzer target: infergate:data's "c" messages (fuzz_redis_data.h). */
#define FUZZ_DATA_KIND 'c'
#include "fuzz_redis_data.h"
