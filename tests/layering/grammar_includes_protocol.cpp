// Built only by the layering test, which expects this to FAIL: grammar/ must not see protocol/.
#include "protocol/tokenizer/tokenizer.hpp"
int layering_probe_grammar() { return 0; }
