// Shared helpers of the replay tests: where the traces are, and a temporary directory.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace kvtier::internal::testing {

inline std::string First500Path() {
  return std::string(KVTIER_REPLAY_TEST_DATA) + "/mooncake_first500.jsonl";
}

inline std::string SharedTracePath() {
  return std::string(KVTIER_SHARED_TRACES) + "/mooncake_synthetic_trace.jsonl";
}

// A unique directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "kvtier-replay-test-XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kvtier::internal::testing
