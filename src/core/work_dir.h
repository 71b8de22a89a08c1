// Work folders of benches and replays: scratch directories kvtier creates, fills and removes. A run
// that is killed cannot remove its folder, so each folder carries a marker file naming the process
// that made it (host, boot, pid and the pid's start time), and the next run under the same parent
// removes the folders of runs that no longer exist. Only folders that carry a valid marker written
// by kvtier for this host and this user are ever removed; anything else is left alone.
//
// Layout: PARENT/<prefix>.<pid>.XXXXXX/.kvtier-work (the marker) + whatever the run writes.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <sys/types.h>

#include "kvtier/status.h"

namespace kvtier::internal {

inline constexpr const char* kWorkMarkerName = ".kvtier-work";

// Who made a work folder, as written in its marker.
struct WorkOwner {
  std::string host;
  std::string boot_id;
  pid_t pid = 0;
  uint64_t start_ticks = 0;  // the process's start time in clock ticks since boot

  static WorkOwner Self();
  std::string ToMarkerText() const;
  // InvalidArgument unless `text` is a marker exactly as ToMarkerText writes it.
  static Result<WorkOwner> FromMarkerText(const std::string& text);
  // True when the process is still running (same host and boot, pid alive with the same start
  // time) or cannot be judged (another host): such folders are never removed.
  bool MayBeAlive() const;
};

class WorkDir {
 public:
  // Removes leftovers of dead runs under `parent` (RemoveDeadWorkDirs), then creates a fresh marked
  // folder PARENT/<prefix>.<pid>.XXXXXX, creating `parent` if it is missing.
  static Result<WorkDir> Create(const std::string& parent, const std::string& prefix);

  WorkDir() = default;
  WorkDir(WorkDir&& other) noexcept;
  WorkDir& operator=(WorkDir&& other) noexcept;
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  ~WorkDir();  // removes the folder, unless Keep() was called

  const std::string& path() const { return path_; }
  // Leaves the folder in place for the user and removes its marker, so no later run removes it.
  void Keep();

 private:
  explicit WorkDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Removes every folder PARENT/<prefix>.* that is a real directory (not a link) owned by this user
// and carries a valid marker of a process that no longer runs on this host. The marker goes last,
// so a removal that is itself interrupted is finished by the next run. Returns how many were
// removed; a parent that does not exist holds none.
Result<size_t> RemoveDeadWorkDirs(const std::string& parent, const std::string& prefix);

}  // namespace kvtier::internal
