/* libFuzzer target: infergate:data's "b" messages (fuzz_redis_data.h). */
#define FUZZ_DATA_KIND 'b'
#include "fuzz_redis_data.h"
