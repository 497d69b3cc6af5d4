/* libFuzzer target: infergate:data's "f" messages (fuzz_redis_data.h). */
#define FUZZ_DATA_KIND 'f'
#include "fuzz_redis_data.h"
