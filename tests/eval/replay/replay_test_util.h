// Shared helpers of the replay tests: where the traces are, and a temporary directory.
#pragma once

#include "support/temp_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace kvtier::internal::testing {

inline std::string First500Path() {
  return std::string(KVTIER_REPLAY_TEST_DATA) + "/mooncake_first500.jsonl";
}

// The whole public trace, shipped in the repository's traces/ folder.
inline std::string PublicTracePath() {
  return std::string(KVTIER_PUBLIC_TRACES) + "/mooncake_synthetic_trace.jsonl";
}
using kvtier::testing::TempDir;

}  // namespace kvtier::internal::testing
