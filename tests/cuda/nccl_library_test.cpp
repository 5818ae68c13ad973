// NCCL opened at run time (gpu/cuda/parallel/nccl_library.hpp): the real library and refusals of
// wrong paths. No GPU needed: only ncclGetVersion and ncclGetErrorString are called.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "gpu/cuda/parallel/nccl_library.hpp"

namespace cuda = actorserve::gpu::cuda;

namespace {

constexpr const char* installed_nccl = "/usr/local/cuda/lib64/libnccl.so.2";

/// The loaded CUDA runtime's file (a real shared library without NCCL's symbols), or "" where it
/// is linked statically.
std::string cudart_file() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cudaRuntimeGetVersion), &info) == 0 || !info.dli_fname) return {};
  const std::string file = info.dli_fname;
  return file.find("libcudart") != std::string::npos ? file : std::string();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(NcclLibrary, DecodesBothVersionCodeFormats) {
  const auto v228 = cuda::decode_nccl_version(22809);
  EXPECT_EQ(v228.to_string(), "2.28.9");
  const auto v27 = cuda::decode_nccl_version(2708);
  EXPECT_EQ(v27.to_string(), "2.7.8");
}

TEST(NcclLibrary, SearchFindsTheInstalledNcclAndReadsItsVersion) {
  auto lib = cuda::load_nccl("");
  if (!lib && !std::filesystem::exists(installed_nccl))
    GTEST_SKIP() << "no NCCL installed here (" << installed_nccl << " missing): " << lib.err().message;
  ASSERT_TRUE(lib.ok()) << lib.err().message;
  const cuda::nccl_library& nccl = **lib;
  EXPECT_EQ(nccl.version.major, 2);
  EXPECT_GE(nccl.version.minor, cuda::min_nccl_version.minor);
  int code = 0;
  ASSERT_EQ(nccl.fn.get_version(&code), ncclSuccess);
  EXPECT_EQ(cuda::decode_nccl_version(code).to_string(), nccl.version.to_string());
  // The error text comes from the library itself.
  EXPECT_TRUE(contains(nccl.describe(ncclInvalidArgument, "ncclAllReduce"), "ncclAllReduce")) << nccl.describe(
      ncclInvalidArgument, "ncclAllReduce");
  EXPECT_TRUE(contains(nccl.describe(ncclInvalidArgument, "x"), "invalid argument"))
      << nccl.describe(ncclInvalidArgument, "x");
  EXPECT_TRUE(nccl.check(ncclSuccess, "x").ok());
  EXPECT_FALSE(nccl.check(ncclSystemError, "x").ok());
  // Loaded once: the same object again.
  auto again = cuda::load_nccl("");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *lib);
}

TEST(NcclLibrary, AnExplicitPathIsLoaded) {
  if (!std::filesystem::exists(installed_nccl)) GTEST_SKIP() << installed_nccl << " missing";
  auto lib = cuda::load_nccl(installed_nccl);
  ASSERT_TRUE(lib.ok()) << lib.err().message;
  EXPECT_EQ((*lib)->path, installed_nccl);
  EXPECT_EQ((*lib)->version.major, 2);
}

TEST(NcclLibrary, AMissingExplicitPathIsRefusedNamingItAndTheFlag) {
  auto lib = cuda::load_nccl("/no/such/dir/libnccl.so.2");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.err().code, actorserve::error_code::not_found);
  EXPECT_TRUE(contains(lib.err().message, "/no/such/dir/libnccl.so.2")) << lib.err().message;
  EXPECT_TRUE(contains(lib.err().message, "--nccl-library")) << lib.err().message;
}

TEST(NcclLibrary, ALibraryWithoutNcclsSymbolsIsRefusedNamingTheMissingOne) {
  for (const std::string& path : {std::string("libm.so.6"), cudart_file()}) {
    if (path.empty()) continue;  // the CUDA runtime is linked statically
    auto lib = cuda::load_nccl(path);
    ASSERT_FALSE(lib.ok()) << path;
    EXPECT_EQ(lib.err().code, actorserve::error_code::unsupported);
    EXPECT_TRUE(contains(lib.err().message, path)) << lib.err().message;
    EXPECT_TRUE(contains(lib.err().message, "ncclGetVersion")) << lib.err().message;
    EXPECT_TRUE(contains(lib.err().message, "--nccl-library")) << lib.err().message;
  }
}
