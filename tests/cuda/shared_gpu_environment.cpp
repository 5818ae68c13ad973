// The CUDA environment of the test process, set before its first CUDA call (static
// initialisation, ahead of GoogleTest's main). The tensor-parallel tests put two ranks on one GPU,
// whose one-shot collectives spin until every rank's kernel has run, which CUDA never promises
// for two streams of one device (docs/tensor-parallel.md, "Unproven on a shared GPU"). Two known
// ways a rank stalls behind another's waiting kernel are closed here: lazy module loading, which
// may synchronise the context the first time a kernel runs, and hardware queues shared between
// the ranks' streams (8 by default). A variable the caller set is left as it is.
#include <cstdlib>

namespace {

const bool shared_gpu_environment_set = [] {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  return true;
}();

}  // namespace
