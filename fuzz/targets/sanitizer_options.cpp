// Built-in sanitizer defaults of every fuzz target ($UBSAN_OPTIONS / $ASAN_OPTIONS still override
// or extend them): UBSan findings stop the run like crashes, with a stack trace.
extern "C" const char* __ubsan_default_options();
extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

extern "C" const char* __asan_default_options();
extern "C" const char* __asan_default_options() { return "detect_leaks=1:print_summary=1"; }
