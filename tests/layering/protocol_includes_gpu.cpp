// Built only by the layering test, which expects this to FAIL: protocol/ must not see gpu/.
#include "gpu/executor.hpp"
int layering_probe() { return 0; }
